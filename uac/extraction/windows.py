"""Extraction windows: a user's turns batched for one model call. Pure: no I/O.

A user's window closes when it holds ``turns`` turns, when the next turn would
take it over ``chars`` characters or ``span`` of event time, when the next turn
belongs to another conversation or session (the end of a session), and at the
end of the input (:meth:`TurnWindows.flush`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from uac.extraction.turns import Turn


@dataclass(frozen=True, slots=True)
class WindowPolicy:
    """When an extraction window closes (see the module docstring)."""

    turns: int = 20
    chars: int = 12_000
    span: timedelta = timedelta(hours=6)

    def __post_init__(self) -> None:
        if self.turns < 1 or self.chars < 1 or self.span <= timedelta(0):
            raise ValueError("window turns, chars and span must be positive")


@dataclass(slots=True)
class _Open:
    turns: list[Turn] = field(default_factory=list)
    chars: int = 0


class TurnWindows:
    """Per-user open windows. :meth:`add` returns the windows a turn closed, in order."""

    def __init__(self, policy: WindowPolicy | None = None) -> None:
        self.policy = policy or WindowPolicy()
        self._open: dict[str, _Open] = {}

    def add(self, turn: Turn) -> list[list[Turn]]:
        closed: list[list[Turn]] = []
        window = self._open.setdefault(turn.user_id, _Open())
        if window.turns and self._breaks(window, turn):
            closed.append(self._close(turn.user_id))
            window = self._open.setdefault(turn.user_id, _Open())
        window.turns.append(turn)
        window.chars += len(turn.text)
        if len(window.turns) >= self.policy.turns:
            closed.append(self._close(turn.user_id))
        return closed

    def _breaks(self, window: _Open, turn: Turn) -> bool:
        first, last = window.turns[0], window.turns[-1]
        return (turn.conversation_id != last.conversation_id
                or turn.session_id != last.session_id
                or window.chars + len(turn.text) > self.policy.chars
                or turn.timestamp - first.timestamp > self.policy.span)

    def _close(self, user_id: str) -> list[Turn]:
        return self._open.pop(user_id).turns

    def flush(self) -> list[list[Turn]]:
        """Close every open window (end of input), users in first-seen order."""
        out = [w.turns for w in self._open.values() if w.turns]
        self._open.clear()
        return out

    @property
    def pending(self) -> int:
        """Turns waiting in open windows."""
        return sum(len(w.turns) for w in self._open.values())
