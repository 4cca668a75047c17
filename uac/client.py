"""The client SDK: chat systems send turns, integrations send observations, services read alerts.

:class:`UacProducer` puts a record on the right topic with the right key (the user
id), partition (the user's, see :func:`uac.streams.topics.partition_for`) and
encoding (Avro in the Confluent wire format); it validates first, so a bad record
fails at the sender with a clear error instead of reaching the dead-letter topic.
:class:`AlertReader` reads alert events back::

    async with UacProducer("127.0.0.1:9092") as producer:
        await producer.send_turn({"user": "maya", "conversation": "chat-1", "turn_id": "t1",
                                  "role": "user", "text": "I'm allergic to penicillin.",
                                  "timestamp": "2025-01-15T09:30:00Z"})
    async with AlertReader("127.0.0.1:9092", users={"maya"}) as alerts:
        async for event in alerts:
            print(event.kind, event.alert.message)
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

from uac.domains.facts import Tick, iso
from uac.errors import CodecError, UacError
from uac.executor.alerts import AlertEvent
from uac.extraction.turns import Turn, parse_turn
from uac.streams.avro import AvroCodec
from uac.streams.observations import parse_observation
from uac.streams.topics import partition_for, user_key, user_of_key

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sent:
    """Where a record landed."""

    topic: str
    partition: int
    offset: int


class UacProducer:
    """Sends turns and observations to uac's topics. ``start()``/``stop()`` or ``async with``.

    ``acks="all"`` and an idempotent producer by default: a retried send is not written twice.
    """

    def __init__(self, bootstrap: str, *, codec: AvroCodec | None = None, prefix: str = "",
                 **producer_options: Any) -> None:
        self.bootstrap = bootstrap
        self.codec = codec or AvroCodec()
        self.prefix = prefix
        self._options = {"acks": "all", "enable_idempotence": True, "linger_ms": 5,
                         **producer_options}
        self._producer: Any = None
        self._partitions: dict[str, int] = {}

    async def start(self) -> UacProducer:
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, **self._options)
        await self._producer.start()
        return self

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def __aenter__(self) -> UacProducer:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def send_turn(self, turn: Turn | Mapping[str, Any]) -> Sent:
        """Send one conversation turn (a :class:`Turn` or its JSON object) to ``uac.turns``."""
        record = turn if isinstance(turn, Turn) else parse_turn(dict(turn), "turn")
        return await self._send("uac.turns", record.user_id, record)

    async def send_observation(self, observation: Mapping[str, Any]) -> Sent:
        """Send one structured observation (the JSON object of ``uac ingest``) to
        ``uac.observations``; it is validated here first (:class:`~uac.errors.ValidationError`)."""
        data = dict(observation)
        parse_observation(data, "observation")
        return await self._send("uac.observations", str(data["user"]), data)

    async def send_tick(self, at: datetime, *, user_id: str = "") -> Sent:
        """Advance event time on the partition of ``user_id`` (time-based rules run)."""
        return await self._send("uac.observations", user_id, Tick(at))

    async def flush(self) -> None:
        if self._producer is not None:
            await self._producer.flush()

    async def _send(self, base: str, user_id: str, record: object) -> Sent:
        if self._producer is None:
            raise UacError("the producer is not started: use `async with` or await start()")
        topic = self.prefix + base
        partitions = self._partitions.get(topic)
        if partitions is None:
            from aiokafka.errors import KafkaTimeoutError, UnknownTopicOrPartitionError

            try:
                found = await self._producer.partitions_for(topic)
            except (UnknownTopicOrPartitionError, KafkaTimeoutError):
                found = None
            if not found:
                raise UacError(f"topic {topic} does not exist: run `uac topics create`")
            partitions = self._partitions[topic] = len(found)
        value = self.codec.encode(base, record)
        meta = await self._producer.send_and_wait(
            topic, value, key=user_key(user_id), partition=partition_for(user_id, partitions))
        return Sent(topic, meta.partition, meta.offset)


class AlertReader:
    """Alert events from ``uac.alerts``, optionally of some users only. An async iterator.

    ``group_id`` None reads without committing offsets (every start reads from
    ``auto_offset_reset``, default the beginning); a group id resumes where the group
    left off. A value that cannot be decoded is logged and counted in ``undecodable``.
    """

    def __init__(self, bootstrap: str, *, users: set[str] | None = None, group_id: str | None = None,
                 codec: AvroCodec | None = None, prefix: str = "",
                 auto_offset_reset: str = "earliest") -> None:
        self.bootstrap, self.users, self.group_id = bootstrap, users, group_id
        self.codec = codec or AvroCodec()
        self.topic = prefix + "uac.alerts"
        self.auto_offset_reset = auto_offset_reset
        self.undecodable = 0
        self._consumer: Any = None

    async def start(self) -> AlertReader:
        from aiokafka import AIOKafkaConsumer

        self._consumer = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=self.group_id,
            auto_offset_reset=self.auto_offset_reset, enable_auto_commit=self.group_id is not None)
        await self._consumer.start()
        return self

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def __aenter__(self) -> AlertReader:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    def __aiter__(self) -> AsyncIterator[AlertEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[AlertEvent]:
        if self._consumer is None:
            raise UacError("the reader is not started: use `async with` or await start()")
        async for message in self._consumer:
            if self.users is not None and user_of_key(message.key or b"") not in self.users:
                continue
            try:
                yield self.codec.decode_as("uac.alerts", message.value, AlertEvent)
            except CodecError as exc:
                self.undecodable += 1
                log.warning("undecodable alert at %s[%d]@%d: %s", message.topic, message.partition,
                            message.offset, exc.reason)


def describe(event: AlertEvent) -> str:
    """One line for an alert event: time, kind, rule, message."""
    return f"{iso(event.at)} {event.kind.value} {event.alert.rule_id}: {event.alert.message}"
