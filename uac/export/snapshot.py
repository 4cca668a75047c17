"""What an export reads from the state store: one user's state, alerts and event time.

Everything is read through one read-only connection, so it is one consistent
view: a writer cannot commit while it is open (DuckDB: one writer or many
readers), and the connection is closed as soon as the reading is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from uac.checkpointer.duckdb_store import DuckDBStateStore
from uac.checkpointer.fold import fold
from uac.checkpointer.state import UserState
from uac.errors import ExportError
from uac.executor.alerts import Alert, AlertStatus
from uac.settings import Settings


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One user's memory as of the store's last checkpoint."""

    user_id: str
    exported_at: datetime
    """The store's event-time watermark (never the wall clock)."""
    state_version: int
    state: UserState
    open_alerts: tuple[Alert, ...]
    """Open alerts, by (subject, rule id)."""
    days_ahead: int
    lapse_days_ahead: int


def _store(settings: Settings) -> DuckDBStateStore:
    return DuckDBStateStore(settings.store_path, read_only=True,
                            lock_timeout=settings.lock_timeout)


def read_snapshot(user_id: str, *, settings: Settings) -> Snapshot:
    """Read ``user_id``'s facts (folded here), open alerts, state version and the watermark."""
    store = _store(settings)
    try:
        facts = store.load_facts(user_id)
        if not facts:
            raise ExportError(f"unknown user {user_id!r}: the memory has no facts about them")
        checkpoint = store.checkpoint()
        version = store.user_version(user_id)
        alerts = store.alerts(user_id)
    finally:
        store.close()
    if checkpoint.watermark is None:
        raise ExportError("the state store has no event time yet (no checkpoint); ingest first")
    state = fold(facts).get(user_id) or UserState(user_id)
    open_alerts = sorted((a for a in alerts if a.status is AlertStatus.OPEN),
                         key=lambda a: (a.subject, a.rule_id, a.alert_id))
    return Snapshot(user_id, checkpoint.watermark, version, state, tuple(open_alerts),
                    settings.rule_days_ahead, settings.lapse_days_ahead)


def list_users(*, settings: Settings) -> list[str]:
    """Every user the store knows, sorted."""
    store = _store(settings)
    try:
        return sorted(store.users())
    finally:
        store.close()
