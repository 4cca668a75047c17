"""End to end against the real broker: the demo conversation and LoCoMo produced to ``uac.turns``, the
worker (a subprocess) extracting each window with the user's state; its facts, state and alerts equal
what the embedded pipeline computes from the same input, also across a restart (the new worker reads
its partitions' facts back before extracting)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.test_worker import (
    DEMO,
    PARTITIONS,
    WorkerProcess,
    consume,
    demo,
    produce,
    running_worker,
    wait_committed,
    without_offset,
)
from tests.test_worker_checkpoint import consume_state
from tests.test_worker_robustness import Worker, locomo_all
from tests.test_worker_robustness import produce as produce_by_user
from uac import api
from uac.domains.facts import Fact, Tick
from uac.extraction.turns import Turn, parse_turn
from uac.settings import Settings
from uac.streams import topics
from uac.streams.topics import partition_for, state_key
from uac.streams.worker_extract import tick_key

CHECKPOINT = {"UAC_WORKER_CHECKPOINT": "1"}
CORRECTION = {"user": "maya", "conversation": "maya-chat", "session": "s17", "turn_id": "s17-t1",
              "role": "user", "text": "Actually my passport expires in 2031, not 2030.",
              "timestamp": "2025-08-01T09:00:00Z"}
"""After the restart: corrects the passport's expiry that session 13 corrected (to 2030)."""


def embedded_facts(settings: Settings) -> dict[str, Fact]:
    """Every fact an embedded memory holds, by id."""
    return {v.fact.fact_id: v.fact for user in api.users(settings=settings)
            for v in api.facts(user, settings=settings)}


def facts_of(records: list[Any]) -> dict[str, Fact]:
    return {v.fact_id: v for *_, v in records if isinstance(v, Fact)}


def assert_same_facts(got: dict[str, Fact], expected: dict[str, Fact], tail: str) -> None:
    missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
    assert not missing and not extra, (
        f"missing {[expected[i] for i in sorted(missing)][:3]}\nextra {[got[i] for i in sorted(extra)][:3]}"
        f"\n{tail}")
    assert got == expected  # contents too


@pytest.mark.kafka
def test_demo_end_to_end_equals_the_embedded_pipeline_and_survives_a_restart(
        kafka_broker: Any, tmp_path: Path) -> None:
    """The worker's windows are the embedded ones (a session each; the last one closed by the idle
    timer, in the embedded pipeline by the tick), so the facts are the same, not merely similar.

    The demo's closing tick is produced once the turns' facts are out: it goes to ``uac.observations``,
    and nothing orders it after turns on another topic (sent together, it reaches ``uac.facts`` before
    the later windows' facts, and time-based alerts differ). The embedded pipeline reads it after them."""
    bootstrap = kafka_broker.bootstrap
    turns, tick = demo()
    plain = Settings(data_dir=tmp_path / "embedded")
    api.ingest(DEMO, settings=plain)
    expected = embedded_facts(plain)
    alerts = {(e.alert.alert_id, e.kind) for e in api.alert_events("maya", settings=plain)}
    entities = {state_key("maya", r.entity_type, r.entity_id): r for r in api.state("maya", settings=plain)}
    assert any(f.supersedes for f in expected.values()) and alerts and entities

    with running_worker(bootstrap, tmp_path, CHECKPOINT) as (proc, prefix):
        started = time.monotonic()
        asyncio.run(produce(bootstrap, prefix, turns))
        last = Tick(max(t.timestamp for t in turns))  # the last window is out
        records = asyncio.run(consume(bootstrap, prefix + "uac.facts", lambda out: facts_of(out).keys()
                                      >= expected.keys() and any(v == last for *_, v in out), timeout=60))
        assert_same_facts(facts_of(records), expected, proc.tail())
        asyncio.run(produce(bootstrap, prefix, [], tick=tick, tick_user="maya"))
        print(f"{len(turns)} turns -> {len(expected)} facts as embedded ({time.monotonic() - started:.1f} s)")

        def alert_set(out: list[Any]) -> set[Any]:
            return {(v.alert.alert_id, v.kind) for _, _, v in out}

        got = alert_set(asyncio.run(consume(bootstrap, prefix + "uac.alerts",
                                            lambda out: alert_set(out) >= alerts, timeout=60)))
        assert got == alerts, f"missing {alerts - got}, extra {got - alerts}\n{proc.tail()}"
        state = asyncio.run(consume_state(bootstrap, prefix + "uac.state", lambda latest: all(
            k in latest and latest[k].attributes == r.attributes for k, r in entities.items()), timeout=60))
        live = {k: (r.entity_type, r.entity_id, r.attributes) for k, r in state.items() if r.exists}
        assert live == {k: (r.entity_type, r.entity_id, r.attributes) for k, r in entities.items()}
        part = partition_for("maya", PARTITIONS)
        done = asyncio.run(wait_committed(bootstrap, f"{prefix}uac", prefix + "uac.turns", part, len(turns)))
        assert done == len(turns), proc.tail()
        assert proc.stop() == 0, proc.tail()  # SIGTERM

    restart(bootstrap, prefix, tmp_path, expected)


def restart(bootstrap: str, prefix: str, tmp_path: Path, before: dict[str, Fact]) -> None:
    """A new worker on the same topics: its view of the partition is read back from ``uac.facts``, so
    the correction supersedes the passport fact of session 13, as the embedded pipeline's does."""
    correction = parse_turn(CORRECTION, "correction")
    plain = Settings(data_dir=tmp_path / "embedded-after")
    api.ingest([*DEMO.read_text().splitlines(), json.dumps(CORRECTION)], settings=plain)
    after = embedded_facts(plain)
    (fixed,) = [f for f in after.values() if f.provenance == (correction.turn_id,)]
    (passport,) = [f for f in before.values() if f.entity_type == "passport" and "s13-t1" in f.provenance]
    assert fixed.supersedes == (passport.fact_id,) and fixed.attributes["expiry_date"] == "2031-12-20"

    (tmp_path / "second").mkdir()
    second = WorkerProcess(bootstrap, prefix, tmp_path / "second")
    try:
        second.wait_healthy(time.monotonic() + 60)
        asyncio.run(produce(bootstrap, prefix, [correction]))
        records = asyncio.run(consume(bootstrap, prefix + "uac.facts",
                                      lambda out: fixed.fact_id in facts_of(out), timeout=60))
        got = facts_of(records)
        assert fixed.fact_id in got, second.tail()
        assert_same_facts(got, after, second.tail())
    finally:
        print(f"second worker exit code {second.stop()}; log tail:\n{second.tail(10)}")


@pytest.mark.kafka
def test_locomo_end_to_end_equals_the_embedded_pipeline(
        kafka_broker: Any, tmp_path: Path, locomo_dir: Path) -> None:
    """Every LoCoMo turn, produced before the worker starts (its windows are then the policy's, as in
    the embedded pipeline); the facts on ``uac.facts`` are the embedded pipeline's."""
    bootstrap = kafka_broker.bootstrap
    turns: list[Turn] = locomo_all(locomo_dir)
    assert turns == [t for p in sorted(locomo_dir.glob("*.json")) for t in api.read_locomo(p)]
    plain = Settings(data_dir=tmp_path / "embedded")
    api.ingest_turns(turns, settings=plain)
    expected = embedded_facts(plain)
    assert expected

    prefix = f"e{uuid.uuid4().hex[:8]}-"
    asyncio.run(topics.ensure_topics(bootstrap, partitions=PARTITIONS, prefix=prefix))
    began = time.monotonic()
    produce_by_user(bootstrap, prefix, turns)
    print(f"produced {len(turns)} turns in {time.monotonic() - began:.1f} s")
    last: dict[str, datetime] = {}
    for t in turns:
        last[t.user_id] = max(last.get(t.user_id, t.timestamp), t.timestamp)
    ends = {tick_key(user, Tick(at)) for user, at in last.items()}  # every user's last window is out
    worker = Worker(bootstrap, prefix, tmp_path, "l1").start()
    try:
        records = asyncio.run(consume(bootstrap, prefix + "uac.facts", lambda out: facts_of(out).keys()
                                      >= expected.keys() and ends <= {without_offset(k) for k, *_ in out},
                                      timeout=90))
        worker.check_alive()
        assert ends <= {without_offset(k) for k, *_ in records}, worker.tail()
        got = facts_of(records)
        assert_same_facts(got, expected, worker.tail())
        print(f"{len(turns)} LoCoMo turns -> {len(got)} facts as embedded ({time.monotonic() - began:.1f} s)")
    finally:
        print(f"worker exit code {worker.stop()}")

