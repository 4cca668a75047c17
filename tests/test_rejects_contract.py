"""One contract, two adapters for the reject store."""

from __future__ import annotations

from pathlib import Path

import pytest

from uac.streams.rejects import InMemoryRejectStore, JsonlRejectStore, Reject, RejectStore


@pytest.fixture(params=["memory", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> RejectStore:
    return InMemoryRejectStore() if request.param == "memory" else JsonlRejectStore(
        tmp_path / "rejects.jsonl")


def test_rejects_keep_step_source_reason_and_payload(store: RejectStore) -> None:
    first = Reject("ingest.parse", "a.jsonl:3", "not valid JSON", "{oops")
    second = Reject("executor.rules", "rule x, user u", "ZeroDivisionError: x", "2025-01-01")
    store.add(first)
    store.add(second)
    store.flush()
    assert list(store) == [first, second]
    store.close()
