"""The real Kafka test broker: produce/consume through aiokafka, compacted topics, restart keeps data."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.conftest_kafka import TopicFactory
from uac.streams.testbroker import KafkaBroker

pytestmark = pytest.mark.kafka

DEADLINE_S = 30.0


async def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> list[int]:
    """Send (key, value) pairs in order; return the partition each landed on."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        partitions = []
        for key, value in records:
            meta = await producer.send_and_wait(topic, value=value, key=key)
            partitions.append(meta.partition)
        return partitions
    finally:
        await producer.stop()


async def _consume(bootstrap: str, topic: str, expected: int, *, group_id: str | None = None) -> list[Any]:
    """Read ``expected`` records of ``topic`` from the beginning, polling until a deadline."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group_id,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        records: list[Any] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(records) < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for batch in batches.values():
                records.extend(batch)
        return records
    finally:
        await consumer.stop()


def test_produce_and_consume_round_trip(kafka_broker: KafkaBroker, topic_factory: TopicFactory) -> None:
    topic = topic_factory(4)
    keys = [f"user-{i}".encode() for i in range(8)]
    sent = [(key, f"{key.decode()}#{n}".encode()) for n in range(3) for key in keys]

    partitions = asyncio.run(_produce(kafka_broker.bootstrap, topic, sent))
    records = asyncio.run(_consume(kafka_broker.bootstrap, topic, len(sent), group_id=f"g-{topic}"))

    assert sorted((r.key, r.value) for r in records) == sorted(sent)
    by_key: dict[bytes, set[int]] = {}
    for (key, _), partition in zip(sent, partitions, strict=True):
        by_key.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in by_key.values()), by_key  # a key always goes to one partition
    assert len({p for ps in by_key.values() for p in ps}) > 1  # and the keys spread over partitions
    for r in records:  # the consumer sees each record where the producer put it, in order per key
        assert by_key[r.key] == {r.partition}
    for key in keys:
        assert [r.value for r in records if r.key == key] == [v for k, v in sent if k == key]


def test_compacted_topic(kafka_broker: KafkaBroker, topic_factory: TopicFactory) -> None:
    topic = topic_factory(1, config={"cleanup.policy": "compact"})

    async def describe() -> dict[str, str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
        await admin.start()
        try:
            [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        finally:
            await admin.close()
        [resource] = response.to_object()["resources"]
        assert resource["error_code"] == 0, resource
        return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}

    assert asyncio.run(describe())["cleanup.policy"] == "compact"


def test_restart_keeps_data(kafka_broker: KafkaBroker, topic_factory: TopicFactory) -> None:
    topic = topic_factory(2)
    port = kafka_broker.port
    asyncio.run(_produce(kafka_broker.bootstrap, topic, [(b"k", b"before restart")]))

    kafka_broker.restart()

    assert kafka_broker.port == port and kafka_broker.running
    records = asyncio.run(_consume(kafka_broker.bootstrap, topic, 1))
    assert [(r.key, r.value) for r in records] == [(b"k", b"before restart")]
