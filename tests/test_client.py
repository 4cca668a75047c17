"""The client SDK on the real broker: turns and observations land on the user's partition,
Avro-encoded; the alert reader returns alert events, filtered by user, skipping poison."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from uac.client import AlertReader, UacProducer
from uac.errors import UacError, ValidationError
from uac.executor.alerts import Alert, AlertEvent, AlertEventKind, AlertStatus, Evidence, Severity
from uac.extraction.turns import Turn
from uac.streams.avro import AvroCodec
from uac.streams.testbroker import KafkaBroker
from uac.streams.topics import ensure_topics, partition_for, user_key

pytestmark = pytest.mark.kafka
T0 = datetime(2025, 1, 15, 9, 30, tzinfo=UTC)


def turn(user: str, n: int) -> dict[str, Any]:
    return {"user": user, "conversation": "c", "turn_id": f"t{n}", "role": "user",
            "text": f"message {n} from {user} ✓", "timestamp": f"2025-01-15T09:{n:02d}:00Z"}


async def topics(broker: KafkaBroker) -> str:
    prefix = f"c{uuid.uuid4().hex[:8]}-"
    await ensure_topics(broker.bootstrap, partitions=4, prefix=prefix)
    return prefix


async def consume_all(broker: KafkaBroker, topic: str, count: int) -> list[Any]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    got: list[Any] = []
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while len(got) < count and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                got.extend(records)
    finally:
        await consumer.stop()
    return got


def test_turns_and_observations_land_on_the_users_partition_as_avro(kafka_broker: KafkaBroker) -> None:
    async def scenario() -> None:
        prefix = await topics(kafka_broker)
        codec = AvroCodec()
        async with UacProducer(kafka_broker.bootstrap, prefix=prefix) as producer:
            sent = [await producer.send_turn(turn(user, n)) for n in range(3)
                    for user in ("maya", "ravi", "a/b")]
            obs = await producer.send_observation(
                {"user": "maya", "type": "allergy", "attributes": {"substance": "penicillin"},
                 "valid_time": "2025-01-15", "source_id": "clinic-1"})
            await producer.send_tick(T0, user_id="maya")
        for s in sent:
            assert s.topic == prefix + "uac.turns"
        records = await consume_all(kafka_broker, prefix + "uac.turns", 9)
        assert len(records) == 9
        for r in records:
            value = codec.decode_as("uac.turns", r.value, Turn)
            assert r.key == user_key(value.user_id)
            assert r.partition == partition_for(value.user_id, 4)
        texts = sorted(codec.decode_as("uac.turns", r.value, Turn).text for r in records)
        assert texts[0] == "message 0 from a/b ✓"
        observed = await consume_all(kafka_broker, prefix + "uac.observations", 2)
        assert obs.partition == partition_for("maya", 4)
        assert codec.decode("uac.observations", observed[0].value)["attributes"] == {
            "substance": "penicillin"}
        assert codec.decode("uac.observations", observed[1].value) == {"tick": "2025-01-15T09:30:00Z"}

    asyncio.run(scenario())


def test_bad_records_fail_at_the_sender_with_clear_errors(kafka_broker: KafkaBroker) -> None:
    async def scenario() -> None:
        prefix = await topics(kafka_broker)
        async with UacProducer(kafka_broker.bootstrap, prefix=prefix) as producer:
            with pytest.raises(ValidationError, match="'role' must be one of"):
                await producer.send_turn({**turn("maya", 1), "role": "system"})
            with pytest.raises(ValidationError, match="missing field"):
                await producer.send_observation({"user": "maya", "type": "allergy"})
        async with UacProducer(kafka_broker.bootstrap, prefix="nowhere-",
                               request_timeout_ms=3000) as producer:
            with pytest.raises(UacError, match="does not exist: run `uac topics create`"):
                await producer.send_turn(turn("maya", 1))

    asyncio.run(scenario())


def test_the_alert_reader_filters_by_user_and_skips_poison(kafka_broker: KafkaBroker) -> None:
    from aiokafka import AIOKafkaProducer

    def event(user: str, n: int) -> AlertEvent:
        alert = Alert(f"a{n}", user, "drug_allergy", f"medication/x{n}", Severity.CRITICAL,
                      f"alert {n}", AlertStatus.OPEN, T0, Evidence(("medication/x",), ("f1",), ("t1",)))
        return AlertEvent(AlertEventKind.RAISED, alert, T0)

    async def scenario() -> None:
        prefix = await topics(kafka_broker)
        codec = AvroCodec()
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
        await producer.start()
        try:
            for n, user in enumerate(["maya", "ravi", "maya"]):
                value = codec.encode("uac.alerts", event(user, n))
                await producer.send_and_wait(prefix + "uac.alerts", value, key=user_key(user),
                                             partition=partition_for(user, 4))
            await producer.send_and_wait(prefix + "uac.alerts", b"not avro", key=user_key("maya"),
                                         partition=partition_for("maya", 4))
        finally:
            await producer.stop()
        got: list[AlertEvent] = []
        async with AlertReader(kafka_broker.bootstrap, users={"maya"}, prefix=prefix) as reader:
            async def collect() -> None:
                async for e in reader:
                    got.append(e)
                    if len(got) == 2:
                        return
            await asyncio.wait_for(collect(), timeout=30)
            assert sorted(e.alert.message for e in got) == ["alert 0", "alert 2"]
            assert got[0] == event("maya", int(got[0].alert.alert_id[1:]))

    asyncio.run(scenario())
