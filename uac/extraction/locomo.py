"""The LoCoMo importer: a LoCoMo conversation file as turns, each speaker a user. No I/O.

A LoCoMo file (Maharana et al., ACL 2024) holds two speakers' sessions, each
``session_N`` a list of ``{speaker, dia_id, text}`` (some with an image caption,
``blip_caption``) and ``session_N_date_time`` like ``"1:56 pm on 8 May, 2023"``.
Every turn becomes one :class:`Turn` of its speaker's user, role ``user``:

- user id: ``locomo<file>-<speaker>`` (lower case, spaces as ``-``), e.g. ``locomo26-caroline``;
- conversation ``locomo<file>``, session ``session_N``, turn id ``locomo<file>:<dia_id>``;
- timestamp: the session's time plus 30 s per turn before it in the session (turn order);
- text: the turn's text, plus ``[shared a photo: <caption>]`` when it carries one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from uac.errors import ValidationError
from uac.extraction.turns import Turn

_SESSION = re.compile(r"session_(\d+)")
TURN_SPACING = timedelta(seconds=30)


def session_time(text: str, where: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as an aware UTC datetime."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except (ValueError, AttributeError):
        raise ValidationError(f"session time {text!r} is not like '1:56 pm on 8 May, 2023'",
                              where=where) from None


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-") or "speaker"


def locomo_turns(data: Any, name: str) -> Iterator[Turn]:
    """The turns of one LoCoMo conversation (decoded JSON), session by session, in order.

    ``name`` is the conversation's name (the file's stem, e.g. ``26``). Raises
    :class:`ValidationError` naming the session and turn for anything malformed.
    """
    if not isinstance(data, Mapping):
        raise ValidationError("a LoCoMo file holds one JSON object", where=name)
    conv = data.get("conversation", data)  # the combined release nests it; the per-file one does not
    speakers = [conv.get("speaker_a"), conv.get("speaker_b")]
    if not all(isinstance(s, str) and s.strip() for s in speakers):
        raise ValidationError("'speaker_a' and 'speaker_b' must be names", where=name)
    users = {s: f"locomo{name}-{_slug(s)}" for s in speakers}
    sessions = sorted((int(m.group(1)), k) for k in conv if (m := _SESSION.fullmatch(k)))
    for number, key in sessions:
        where = f"{name}:{key}"
        turns = conv[key]
        if not isinstance(turns, list):
            raise ValidationError("a session must be a list of turns", where=where)
        start = session_time(conv.get(f"{key}_date_time", ""), f"{where}_date_time")
        for index, raw in enumerate(turns):
            yield _turn(raw, users, name, f"session_{number}", start + index * TURN_SPACING,
                        f"{where}[{index}]")


def _turn(raw: Any, users: Mapping[str, str], name: str, session: str, at: datetime,
          where: str) -> Turn:
    if not isinstance(raw, Mapping):
        raise ValidationError("a turn must be an object", where=where)
    speaker, dia_id, text = raw.get("speaker"), raw.get("dia_id"), raw.get("text")
    if speaker not in users:
        raise ValidationError(f"speaker {speaker!r} is neither speaker_a nor speaker_b", where=where)
    if not isinstance(dia_id, str) or not dia_id.strip():
        raise ValidationError("'dia_id' must be a non-empty string", where=where)
    if not isinstance(text, str):
        raise ValidationError("'text' must be a string", where=where)
    caption = raw.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        text = f"{text} [shared a photo: {caption.strip()}]".strip()
    if not text.strip():
        text = "[empty turn]"
    return Turn(users[str(speaker)], f"locomo{name}", f"locomo{name}:{dia_id.strip()}", "user",
                text, at, session)
