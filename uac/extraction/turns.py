"""Conversation turns: the records chat systems send. Parsing and validation; no I/O.

One turn per JSON Lines line::

    {"user": "maya", "conversation": "maya-chat", "turn_id": "s1-t1", "role": "user",
     "text": "I'm allergic to penicillin.", "timestamp": "2025-01-15T09:30:00Z"}

Optional: ``session`` (a session id inside the conversation; a new session closes the
extraction window). ``role`` is ``user`` or ``assistant``; facts come only from what the
user said, assistant turns are context. A turn id is unique per user: it is what facts
cite as their provenance.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uac.domains.facts import iso, to_utc
from uac.errors import ValidationError

TURN_VERSION = 1
ROLES = ("user", "assistant")
TURN_REQUIRED = ("user", "conversation", "turn_id", "role", "text", "timestamp")
TURN_OPTIONAL = ("session",)
MAX_TEXT_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of a conversation, from the user or from the assistant."""

    user_id: str
    conversation_id: str
    turn_id: str
    role: str
    text: str
    timestamp: datetime
    session_id: str = ""
    version: int = TURN_VERSION

    @property
    def from_user(self) -> bool:
        return self.role == "user"

    def to_json(self) -> dict[str, Any]:
        """The turn as its JSON Lines object (what :func:`parse_turn` reads back)."""
        out: dict[str, Any] = {
            "user": self.user_id, "conversation": self.conversation_id, "turn_id": self.turn_id,
            "role": self.role, "text": self.text, "timestamp": iso(self.timestamp)}
        if self.session_id:
            out["session"] = self.session_id
        return out


def is_turn(data: Any) -> bool:
    """Whether a decoded JSON Lines object is a turn (rather than an observation or a tick)."""
    return isinstance(data, dict) and "text" in data and "role" in data


def _field(data: dict[str, Any], name: str, where: str, *, limit: int = 512) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name!r} must be a non-empty string, got {value!r}", where=where)
    if len(value) > limit:
        raise ValidationError(f"{name!r} is longer than {limit} characters", where=where)
    return value.strip()


def parse_turn(data: Any, where: str) -> Turn:
    """Validate one decoded turn object; raises :class:`ValidationError` naming the field."""
    if not isinstance(data, dict):
        raise ValidationError("a turn must be a JSON object", where=where)
    unknown = sorted(set(data) - set(TURN_REQUIRED) - set(TURN_OPTIONAL))
    if unknown:
        raise ValidationError(
            f"unknown field(s) {unknown}; a turn has {list(TURN_REQUIRED + TURN_OPTIONAL)}",
            where=where)
    missing = [name for name in TURN_REQUIRED if name not in data]
    if missing:
        raise ValidationError(f"missing field(s) {missing}", where=where)
    role = _field(data, "role", where)
    if role not in ROLES:
        raise ValidationError(f"'role' must be one of {list(ROLES)}, got {role!r}", where=where)
    text = data["text"]
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("'text' must be a non-empty string", where=where)
    if len(text) > MAX_TEXT_CHARS:
        raise ValidationError(f"'text' is longer than {MAX_TEXT_CHARS} characters", where=where)
    stamp = _field(data, "timestamp", where)
    try:
        timestamp = to_utc(stamp)
    except ValueError:
        raise ValidationError(f"'timestamp' is not an ISO 8601 time: {stamp!r}", where=where) from None
    session = _field(data, "session", where) if "session" in data else ""
    return Turn(_field(data, "user", where), _field(data, "conversation", where),
                _field(data, "turn_id", where), role, text, timestamp, session)
