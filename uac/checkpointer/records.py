"""Records the checkpointer emits per window and the stores persist. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from uac.checkpointer.fold import EntityChange
from uac.domains.facts import Fact, JsonValue
from uac.executor.alerts import AlertEvent

RECORD_VERSION = 1


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """How far the log has been folded: the next offset, the last window, event-time clock."""

    log_offset: int = 0
    window_id: int = -1
    watermark: datetime | None = None
    alert_seq: int = 0
    version: int = RECORD_VERSION


@dataclass(frozen=True, slots=True)
class EntityRow:
    """The current value of one entity after a window (``exists`` False: it was deleted)."""

    user_id: str
    entity_type: str
    entity_id: str
    exists: bool
    attributes: dict[str, JsonValue]
    state_version: int
    is_new: bool = False
    """The store holds no row of this entity yet (it was created): nothing to replace."""


@dataclass(frozen=True, slots=True)
class StateChange:
    """One per touched user per window: the user's new state version and what changed."""

    user_id: str
    state_version: int
    window_id: int
    now: datetime
    changes: tuple[EntityChange, ...]
    version: int = RECORD_VERSION


@dataclass(slots=True)
class CommitBatch:
    """Everything one or more windows produced, committed atomically with the checkpoint."""

    checkpoint: Checkpoint
    facts: list[tuple[int, Fact, bytes]] = field(default_factory=list)
    """(log offset, fact, the fact's encoded log record)."""
    entities: dict[tuple[str, str, str], EntityRow] = field(default_factory=dict)
    state_changes: list[StateChange] = field(default_factory=list)
    alert_events: list[tuple[int, int, AlertEvent]] = field(default_factory=list)
    """(sequence number, window id, event)."""

    def merge(self, other: CommitBatch) -> None:
        """Fold a later batch into this one (later entity rows win)."""
        self.checkpoint = other.checkpoint
        self.facts.extend(other.facts)
        for key, row in other.entities.items():
            earlier = self.entities.get(key)
            if earlier is not None and earlier.is_new != row.is_new:
                row = replace(row, is_new=earlier.is_new)  # new relative to the store, or not
            self.entities[key] = row
        self.state_changes.extend(other.state_changes)
        self.alert_events.extend(other.alert_events)
