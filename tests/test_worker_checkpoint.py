"""The Kafka worker's checkpoint + constraint agent, as a real subprocess against the real broker: the
demo conversation in, state on ``uac.state`` and alerts on ``uac.alerts`` out, the same alerts as the
embedded pipeline computes over the same facts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_worker import (
    DEMO,
    WorkerProcess,
    consume,
    demo,
    expected_fact_ids,
    produce,
    running_worker,
)
from uac import api
from uac.checkpointer.records import EntityRow
from uac.domains.facts import Fact, Tick
from uac.settings import Settings
from uac.streams.avro import AvroCodec
from uac.streams.embedded import EmbeddedPipeline
from uac.streams.topics import partition_for, state_key

PARTITIONS = 4


async def consume_state(bootstrap: str, topic: str, done: Any, timeout: float) -> dict[bytes, EntityRow]:
    """The latest ``uac.state`` record per key (tombstones included), until ``done(latest)``."""
    from aiokafka import AIOKafkaConsumer

    codec = AvroCodec()
    latest: dict[bytes, EntityRow] = {}
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not done(latest):
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for r in records:
                    latest[r.key] = codec.decode_entity(r.key, r.value)
    finally:
        await consumer.stop()
    return latest


@pytest.fixture
def checkpoint_worker(kafka_broker: Any, tmp_path: Path) -> Iterator[tuple[WorkerProcess, str]]:
    with running_worker(kafka_broker.bootstrap, tmp_path, {"UAC_WORKER_CHECKPOINT": "1"}) as started:
        yield started


@pytest.mark.kafka
def test_checkpoint_agent_publishes_the_demo_alerts_and_state(
        checkpoint_worker: tuple[WorkerProcess, str], kafka_broker: Any, tmp_path: Path) -> None:
    """Compares SETS of (alert_id, kind), not event lists: the worker cuts checkpoint windows by its
    own arrival order and idle timer, so its windows differ from the embedded ones and alert event
    times (``at``) and sequence numbers may differ. The expected alerts come from an embedded pipeline
    fed the very facts and ticks the worker wrote to ``uac.facts``, and equal those of the plain
    ``api.ingest`` of the demo file (the worker extracts with the user's state, as the embedded
    pipeline; the tick is produced once the turns' facts are out, see tests/test_worker_e2e.py)."""
    proc, prefix = checkpoint_worker
    bootstrap = kafka_broker.bootstrap
    turns, tick = demo()
    asyncio.run(produce(bootstrap, prefix, turns))
    last = Tick(max(t.timestamp for t in turns))
    asyncio.run(consume(bootstrap, prefix + "uac.facts", lambda out: any(v == last for *_, v in out),
                        timeout=60))  # the last window is out
    asyncio.run(produce(bootstrap, prefix, [], tick=tick, tick_user="maya"))

    # 1. the facts the worker extracted (the test of extraction itself is tests/test_worker.py)
    fact_ids = expected_fact_ids(turns)
    fact_records = asyncio.run(consume(bootstrap, prefix + "uac.facts", lambda out: any(
        isinstance(v, Tick) and v.time == tick for *_, v in out) and {
        v.fact_id for *_, v in out if isinstance(v, Fact)} >= fact_ids, timeout=90))
    inputs = [v for _, _, v in fact_records if isinstance(v, Fact | Tick)]
    assert any(isinstance(v, Tick) and v.time == tick for v in inputs), proc.tail()

    # 2. expected: the embedded pipeline over those facts and ticks (their order on the partition)
    with EmbeddedPipeline(Settings(data_dir=tmp_path / "from-facts")) as pipeline:
        pipeline.ingest(inputs)
        expected = {(e.alert.alert_id, e.kind) for _, _, e in pipeline.store.alert_events("maya")}
        entities = {state_key("maya", r.entity_type, r.entity_id): r for r in pipeline.store.entities("maya")}
    assert expected and entities

    plain = Settings(data_dir=tmp_path / "plain")
    api.ingest(DEMO, settings=plain)
    plain_alerts = {(e.alert.alert_id, e.kind) for e in api.alert_events("maya", settings=plain)}
    assert plain_alerts == expected, (f"plain ingest only: {plain_alerts - expected}; over the worker's "
                                      f"facts only: {expected - plain_alerts}")

    # 3. the worker's alerts
    def alert_set(out: list[Any]) -> set[Any]:
        return {(v.alert.alert_id, v.kind) for _, _, v in out}

    alerts = asyncio.run(consume(bootstrap, prefix + "uac.alerts", lambda out: alert_set(out) >= expected,
                                 timeout=90))
    got = alert_set(alerts)
    assert got == expected, f"missing {expected - got}, extra {got - expected}\n{proc.tail()}"
    part = partition_for("maya", PARTITIONS)
    assert all(p == part for _, p, _ in alerts)

    # 4. the worker's state: the demo's entities, latest version per key
    state = asyncio.run(consume_state(
        bootstrap, prefix + "uac.state",
        lambda latest: all(k in latest and latest[k].attributes == r.attributes for k, r in entities.items()),
        timeout=60))
    live = {k: r for k, r in state.items() if r.exists}
    assert set(live) == set(entities), proc.tail()
    for key, row in entities.items():
        assert (live[key].entity_type, live[key].entity_id, live[key].attributes) == (
            row.entity_type, row.entity_id, row.attributes)
