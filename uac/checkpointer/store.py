"""The state store port: where checkpoints commit typed state, alerts and state changes.

:class:`StateStore` is the abstract port; :class:`InMemoryStateStore` and
:class:`~uac.checkpointer.duckdb_store.DuckDBStateStore` implement it, and one
contract test suite runs against both. A commit is atomic: the outputs of the
windows and the checkpoint offset land together or not at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from uac.checkpointer.records import Checkpoint, CommitBatch, EntityRow, StateChange
from uac.domains.facts import Fact, canonical_json
from uac.executor.alerts import Alert, AlertEvent, AlertStatus


class StateStore(ABC):
    """Persisted state: facts by user, current entities, alerts, state changes, the checkpoint."""

    # -- the checkpointer's side -------------------------------------------------------------
    @abstractmethod
    def checkpoint(self) -> Checkpoint:
        """The last committed checkpoint (a fresh one if nothing was committed)."""

    @abstractmethod
    def commit(self, batch: CommitBatch) -> None:
        """Write a batch's outputs and its checkpoint atomically."""

    @abstractmethod
    def load_facts(self, user_id: str) -> list[Fact]:
        """Every fact of a user, in log order (to rebuild the user's state)."""

    # -- the read side -----------------------------------------------------------------------
    @abstractmethod
    def users(self) -> list[str]:
        """Every user with at least one fact, sorted."""

    @abstractmethod
    def user_version(self, user_id: str) -> int:
        """The user's state version: that of its latest state change (0 if none)."""

    @abstractmethod
    def entities(self, user_id: str) -> list[EntityRow]:
        """The user's current entities, sorted by (type, id)."""

    @abstractmethod
    def alerts(self, user_id: str) -> list[Alert]:
        """The user's alerts (open and resolved, latest state of each), sorted by id."""

    @abstractmethod
    def alert_events(self, user_id: str) -> list[tuple[int, int, AlertEvent]]:
        """The user's alert events as (sequence, window id, event), in order."""

    @abstractmethod
    def state_changes(self, user_id: str) -> list[StateChange]:
        """The user's state-change records, in order."""

    @abstractmethod
    def users_with_types(self, entity_types: Iterable[str]) -> list[str]:
        """Users that currently have an entity of one of these types, sorted."""

    def open_alerts(self, user_id: str) -> dict[str, Alert]:
        return {a.alert_id: a for a in self.alerts(user_id) if a.status is AlertStatus.OPEN}

    def close(self) -> None:  # noqa: B027
        """Release the store."""

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dump(store: StateStore) -> bytes:
    """Canonical bytes of everything a store holds: equal stores give equal bytes."""
    from uac.streams.codec import (
        alert_event_to_dict,
        alert_to_dict,
        fact_to_dict,
        state_change_to_dict,
    )

    out: dict[str, Any] = {"checkpoint": _checkpoint_dict(store.checkpoint()), "users": {}}
    for user in store.users():
        out["users"][user] = {
            "version": store.user_version(user),
            "facts": [fact_to_dict(f) for f in store.load_facts(user)],
            "entities": [
                [r.entity_type, r.entity_id, r.attributes, r.state_version]
                for r in store.entities(user)
            ],
            "alerts": [alert_to_dict(a) for a in store.alerts(user)],
            "alert_events": [[s, w, alert_event_to_dict(e)] for s, w, e in store.alert_events(user)],
            "state_changes": [state_change_to_dict(c) for c in store.state_changes(user)],
        }
    return canonical_json(out)


def _checkpoint_dict(cp: Checkpoint) -> dict[str, Any]:
    from uac.domains.facts import iso

    return {"log_offset": cp.log_offset, "window_id": cp.window_id, "alert_seq": cp.alert_seq,
            "watermark": iso(cp.watermark) if cp.watermark else None}


class InMemoryStateStore(StateStore):
    """The store as dictionaries: for tests and embedding without a disk."""

    def __init__(self) -> None:
        self._checkpoint = Checkpoint()
        self._facts: dict[str, list[tuple[int, Fact]]] = {}
        self._entities: dict[str, dict[tuple[str, str], EntityRow]] = {}
        self._alerts: dict[str, dict[str, Alert]] = {}
        self._events: dict[str, list[tuple[int, int, AlertEvent]]] = {}
        self._changes: dict[str, list[StateChange]] = {}
        self._versions: dict[str, int] = {}

    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    def commit(self, batch: CommitBatch) -> None:
        for offset, fact, _ in batch.facts:
            self._facts.setdefault(fact.user_id, []).append((offset, fact))
        for (user, etype, eid), row in batch.entities.items():
            rows = self._entities.setdefault(user, {})
            if row.exists:
                rows[(etype, eid)] = row
            else:
                rows.pop((etype, eid), None)
        for seq, window, event in batch.alert_events:
            alert = event.alert
            self._alerts.setdefault(alert.user_id, {})[alert.alert_id] = alert
            self._events.setdefault(alert.user_id, []).append((seq, window, event))
        for change in batch.state_changes:
            self._changes.setdefault(change.user_id, []).append(change)
            self._versions[change.user_id] = max(self._versions.get(change.user_id, 0),
                                                 change.state_version)
        self._checkpoint = batch.checkpoint

    def load_facts(self, user_id: str) -> list[Fact]:
        return [f for _, f in sorted(self._facts.get(user_id, []), key=lambda p: p[0])]

    def users(self) -> list[str]:
        return sorted(self._facts)

    def user_version(self, user_id: str) -> int:
        return self._versions.get(user_id, 0)

    def entities(self, user_id: str) -> list[EntityRow]:
        return [row for _, row in sorted(self._entities.get(user_id, {}).items())]

    def alerts(self, user_id: str) -> list[Alert]:
        return [a for _, a in sorted(self._alerts.get(user_id, {}).items())]

    def users_with_types(self, entity_types: Iterable[str]) -> list[str]:
        wanted = set(entity_types)
        return sorted(u for u, rows in self._entities.items() if any(t in wanted for t, _ in rows))

    def alert_events(self, user_id: str) -> list[tuple[int, int, AlertEvent]]:
        return list(self._events.get(user_id, []))

    def state_changes(self, user_id: str) -> list[StateChange]:
        return list(self._changes.get(user_id, []))

