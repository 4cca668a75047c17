"""One contract, two adapters: the in-memory state store and the DuckDB store behave the same."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from uac.checkpointer.duckdb_store import DuckDBStateStore
from uac.checkpointer.fold import ChangeKind, EntityChange
from uac.checkpointer.records import Checkpoint, CommitBatch, EntityRow, StateChange
from uac.checkpointer.store import InMemoryStateStore, StateStore, dump
from uac.domains.facts import make_fact
from uac.errors import StoreBusyError, StoreError
from uac.executor.alerts import Alert, AlertEvent, AlertEventKind, AlertStatus, Evidence
from uac.executor.rules import Severity
from uac.streams.codec import encode_record

NOW = datetime(2025, 7, 8, 15, 20, tzinfo=UTC)


@pytest.fixture(params=["memory", "duckdb"])
def store_factory(request: pytest.FixtureRequest,
                  tmp_path: Path) -> Iterator[Callable[[], StateStore]]:
    opened: list[StateStore] = []

    def make() -> StateStore:
        made: StateStore = InMemoryStateStore() if request.param == "memory" else \
            DuckDBStateStore(tmp_path / "state.duckdb")
        opened.append(made)
        return made

    yield make
    for item in opened:
        item.close()


def alert(status: AlertStatus = AlertStatus.OPEN) -> Alert:
    return Alert("a1", "maya", "drug_allergy", "medication/amoxicillin|allergy/penicillin",
                 Severity.CRITICAL, "amoxicillin is a penicillin", status, NOW,
                 Evidence(("medication/amoxicillin",), ("f1",), ("rx-1",)), {"drug": "amoxicillin"},
                 NOW if status is AlertStatus.RESOLVED else None)


def batch() -> CommitBatch:
    f1 = make_fact(user_id="maya", entity_type="medication", entity_id="amoxicillin",
                   attributes={"name": "amoxicillin", "prescribed_on": "2025-07-08"},
                   valid_time="2025-07-08", provenance=("rx-1",))
    f2 = make_fact(user_id="bob", entity_type="trip", entity_id="paris",
                   attributes={"destination": "Paris", "international": True},
                   valid_time="2025-07-08", provenance=("bk-1",))
    b = CommitBatch(Checkpoint(3, 0, NOW, 1))
    b.facts = [(0, f1, encode_record(f1)), (1, f2, encode_record(f2))]
    b.entities = {
        ("maya", "medication", "amoxicillin"): EntityRow("maya", "medication", "amoxicillin", True,
                                                         dict(f1.attributes), 1),
        ("bob", "trip", "paris"): EntityRow("bob", "trip", "paris", True, dict(f2.attributes), 1)}
    b.state_changes = [StateChange("maya", 1, 0, NOW, (EntityChange(
        "medication", "amoxicillin", ChangeKind.CREATED),))]
    b.alert_events = [(1, 0, AlertEvent(AlertEventKind.RAISED, alert(), NOW))]
    return b


def test_a_fresh_store_is_empty(store_factory: Callable[[], StateStore]) -> None:
    store = store_factory()
    assert store.checkpoint() == Checkpoint()
    assert store.users() == []
    assert store.entities("maya") == []
    assert store.user_version("maya") == 0


def test_commit_then_read_everything_back(store_factory: Callable[[], StateStore]) -> None:
    store = store_factory()
    store.commit(batch())
    assert store.checkpoint() == Checkpoint(3, 0, NOW, 1)
    assert store.users() == ["bob", "maya"]
    assert [f.entity_id for f in store.load_facts("maya")] == ["amoxicillin"]
    assert store.load_facts("maya")[0] == batch().facts[0][1]
    assert store.entities("bob") == [EntityRow("bob", "trip", "paris", True,
                                               {"destination": "Paris", "international": True}, 1)]
    assert store.alerts("maya") == [alert()]
    assert list(store.open_alerts("maya")) == ["a1"]
    assert store.state_changes("maya") == batch().state_changes
    assert store.users_with_types(["trip"]) == ["bob"]
    assert store.user_version("maya") == 1


def test_deleting_an_entity_and_resolving_an_alert(store_factory: Callable[[], StateStore]) -> None:
    store = store_factory()
    store.commit(batch())
    later = CommitBatch(Checkpoint(5, 1, NOW, 2))
    later.entities = {("maya", "medication", "amoxicillin"): EntityRow(
        "maya", "medication", "amoxicillin", False, {}, 2)}
    later.alert_events = [(2, 1, AlertEvent(AlertEventKind.RESOLVED,
                                            alert(AlertStatus.RESOLVED), NOW))]
    later.state_changes = [StateChange("maya", 2, 1, NOW, (EntityChange(
        "medication", "amoxicillin", ChangeKind.DELETED),))]
    store.commit(later)
    assert store.entities("maya") == []
    assert store.alerts("maya")[0].status is AlertStatus.RESOLVED
    assert store.open_alerts("maya") == {}
    assert [e.kind for _, _, e in store.alert_events("maya")] == [AlertEventKind.RAISED,
                                                                  AlertEventKind.RESOLVED]
    assert store.user_version("maya") == 2


def test_both_adapters_dump_the_same_bytes(tmp_path: Path) -> None:
    memory, duck = InMemoryStateStore(), DuckDBStateStore(tmp_path / "s.duckdb")
    for store in (memory, duck):
        store.commit(batch())
    assert dump(memory) == dump(duck)
    duck.close()


def test_duckdb_reader_waits_then_says_the_store_is_busy(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "s.duckdb"
    DuckDBStateStore(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb,sys,time; c=duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); time.sleep(30)", str(path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with pytest.raises(StoreBusyError, match="held by another uac process") as info:
            DuckDBStateStore(path, read_only=True, lock_timeout=0.3)
        assert info.value.retriable
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    DuckDBStateStore(path, read_only=True, lock_timeout=5).close()


def test_duckdb_reader_on_a_missing_store_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="uac ingest"):
        DuckDBStateStore(tmp_path / "none.duckdb", read_only=True)
