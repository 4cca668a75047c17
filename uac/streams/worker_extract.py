"""The extraction agent's logic, independent of faust: raw records in, facts and dead letters out.

:class:`ExtractionAgent` is what the Kafka worker (:mod:`uac.streams.worker`) runs for every record
of ``uac.turns`` and ``uac.observations``. It gets the raw value bytes, where they came from, and an
``ack`` callback; it decodes them itself (so a poison record becomes a :class:`DeadLetter` on
``uac.dlq`` instead of crashing the consumer), and it produces through a ``send`` coroutine that
returns once the broker has the record.

Offsets: a record is acknowledged (``ack()``; the worker commits acknowledged offsets, never past an
unacknowledged one) only after every output it causes was produced and acknowledged by the broker:

* an observation: its fact (or tick) on ``uac.facts``, or its dead letter;
* a turn: it waits in its user's window; when the window closes, the window's facts, a tick at its
  last turn and its rejects are produced and awaited, then each turn of the window is acknowledged.

Windows are kept per (source partition, user): a user lives on one partition, and after a rebalance
:meth:`ExtractionAgent.reset` drops every open window (their turns were never acknowledged, so the
consumer reads them again from the committed offset, here or on the partition's new owner). At worst
a window is extracted twice; the facts then have the same ids and the same ``user/fact_id`` keys,
which compaction collapses.

Open windows close by the :class:`~uac.extraction.windows.WindowPolicy` (session end, turns, chars,
span) and by :meth:`ExtractionAgent.close_idle` (a timer): a user whose window got no turn for
``idle_timeout`` seconds of wall time (the end of the input, as far as the worker can tell).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Gauge

from uac.domains.facts import Fact, Tick, iso
from uac.errors import CodecError, ValidationError
from uac.extraction.extractor import Extractor, WindowResult
from uac.extraction.turns import Turn
from uac.extraction.windows import TurnWindows, WindowPolicy
from uac.metrics import Metrics
from uac.streams.avro import AvroCodec, DeadLetter
from uac.streams.observations import parse_observation
from uac.streams.topics import fact_key, partition_for, user_key, user_of_key

log = logging.getLogger(__name__)

TURNS, OBSERVATIONS, FACTS, DLQ = "uac.turns", "uac.observations", "uac.facts", "uac.dlq"
STEP_TURNS = "extract.turns"
STEP_OBSERVATIONS = "extract.observations"
STEP_DECODE = "worker.decode"
STEP_OBSERVATION = "worker.observation"

Send = Callable[[str, bytes | None, bytes, int], Awaitable[Awaitable[Any]]]
"""``await send(topic, key, value, partition)`` queues the record in the producer (records queued in
order stay in order per partition) and gives an awaitable that resolves once the broker has it."""
Ack = Callable[[], Any]


@dataclass(frozen=True, slots=True)
class Source:
    """Where a consumed record came from (the full topic name, with any prefix)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None


def tick_key(user_id: str, at: Tick) -> bytes:
    """The ``uac.facts`` key of a tick: under the user's key, ``_tick/<iso time>``. A fact id is hex,
    so it never collides with a fact; compaction only collapses the very same tick sent twice."""
    return user_key(user_id) + b"/_tick/" + iso(at.time).encode()


@dataclass(slots=True)
class _Held:
    source: Source
    ack: Ack


@dataclass(slots=True)
class _Slot:
    """One user's open window on one partition, and the records its turns came from."""

    windows: TurnWindows
    held: list[_Held] = field(default_factory=list)
    last_seen: float = 0.0


class ExtractionAgent:
    """Turns and observations to facts, per the module docstring. One instance per worker."""

    def __init__(self, extractor: Extractor, send: Send, *, partitions: int, prefix: str = "",
                 policy: WindowPolicy | None = None, codec: AvroCodec | None = None,
                 metrics: Metrics | None = None, idle_timeout: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, offload: bool = True) -> None:
        self.extractor = extractor
        self.send = send
        self.partitions = partitions
        self.prefix = prefix
        self.policy = policy or WindowPolicy()
        self.codec = codec or AvroCodec()
        self.metrics = metrics or Metrics()
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.offload = offload
        """Run the (blocking) model call in a thread, so the event loop keeps serving."""
        self._slots: dict[tuple[int, str], _Slot] = {}
        self._lock = asyncio.Lock()
        self.pending_turns = Gauge("uac_worker_pending_turns", "Turns waiting in open extraction windows",
                                   registry=self.metrics.registry)
        self.dead_letters = 0
        self.facts_sent = 0

    # -- inputs ----------------------------------------------------------------------------------

    async def on_observation(self, source: Source, value: bytes | None, ack: Ack) -> None:
        """One ``uac.observations`` record: its fact or tick on ``uac.facts``, or a dead letter."""
        self.metrics.records_in.labels(STEP_OBSERVATIONS).inc()
        try:
            data = self.codec.decode(OBSERVATIONS, value)  # type: ignore[arg-type]
        except CodecError as exc:
            await self._poison(STEP_DECODE, str(exc), source, value)
            ack()
            return
        try:
            record = parse_observation(data, f"{source.topic}[{source.partition}]@{source.offset}")
        except ValidationError as exc:
            await self._poison(STEP_OBSERVATION, str(exc), source, value)
            ack()
            return
        if isinstance(record, Tick):
            user = user_of_key(source.key) if source.key else ""
            await (await self._send(FACTS, tick_key(user, record), record,
                                    partition_for(user, self.partitions)))
        else:
            await (await self._send_fact(record))
            self.facts_sent += 1
            self.metrics.facts_appended.inc()
        ack()

    async def on_turn(self, source: Source, value: bytes | None, ack: Ack) -> None:
        """One ``uac.turns`` record: into its user's window (acknowledged when the window is out)."""
        self.metrics.records_in.labels(STEP_TURNS).inc()
        try:
            turn = self.codec.decode_as(TURNS, value, Turn)  # type: ignore[arg-type]
        except CodecError as exc:
            await self._poison(STEP_DECODE, str(exc), source, value)
            ack()
            return
        async with self._lock:
            slot_key = (source.partition, turn.user_id)
            slot = self._slots.get(slot_key)
            if slot is None:
                slot = self._slots[slot_key] = _Slot(TurnWindows(self.policy))
            closed = slot.windows.add(turn)
            slot.held.append(_Held(source, ack))
            slot.last_seen = self.clock()
            for window in closed:
                await self._emit(slot, window)
            if not slot.held:
                del self._slots[slot_key]
            self._update_gauge()

    async def close_idle(self) -> int:
        """Close the windows that got no turn for ``idle_timeout`` seconds; the number closed."""
        closed = 0
        async with self._lock:
            now = self.clock()
            for slot_key, slot in list(self._slots.items()):
                if now - slot.last_seen < self.idle_timeout:
                    continue
                for window in slot.windows.flush():
                    await self._emit(slot, window)
                    closed += 1
                if not slot.held:
                    del self._slots[slot_key]
            self._update_gauge()
        return closed

    async def reset(self) -> None:
        """Forget every open window without acknowledging its turns (a rebalance: they are read again
        from the committed offsets)."""
        async with self._lock:
            dropped = sum(len(s.held) for s in self._slots.values())
            self._slots.clear()
            self._update_gauge()
        if dropped:
            log.info("rebalance: dropped %d turn(s) of open windows; they will be read again", dropped)

    @property
    def pending(self) -> int:
        return sum(len(s.held) for s in self._slots.values())

    # -- outputs ---------------------------------------------------------------------------------

    async def _emit(self, slot: _Slot, window: Sequence[Turn]) -> None:
        """Extract a closed window, produce its facts, tick and rejects, then ack its turns."""
        held, slot.held[:] = slot.held[:len(window)], slot.held[len(window):]
        if self.offload:
            result = await asyncio.to_thread(self.extractor.extract, window, None)
        else:
            result = self.extractor.extract(window, None)
        self._count_call(result)
        user = window[0].user_id
        # Queue everything in order (facts, then the tick that closes the window), then wait for all.
        sent: list[Awaitable[Any]] = [await self._send_fact(fact) for fact in result.facts]
        last = Tick(max(t.timestamp for t in window))
        sent.append(await self._send(FACTS, tick_key(user, last), last, partition_for(user, self.partitions)))
        first = held[0].source
        for reject in result.rejects:
            letter = dataclasses.replace(DeadLetter.from_reject(reject), source_topic=first.topic,
                                         source_partition=first.partition, source_offset=first.offset)
            self.metrics.rejects.labels(reject.step_id).inc()
            self.dead_letters += 1
            sent.append(await self._send(DLQ, user_key(user), letter, partition_for(user, self.partitions)))
        await asyncio.gather(*sent)
        self.facts_sent += len(result.facts)
        self.metrics.facts_appended.inc(len(result.facts))
        for h in held:
            h.ack()

    async def _send_fact(self, fact: Fact) -> Awaitable[Any]:
        return await self._send(FACTS, fact_key(fact.user_id, fact.fact_id), fact,
                          partition_for(fact.user_id, self.partitions))

    async def _send(self, base: str, key: bytes | None, record: object, partition: int) -> Awaitable[Any]:
        return await self.send(self.prefix + base, key, self.codec.encode(base, record), partition)

    async def _poison(self, step_id: str, reason: str, source: Source, value: bytes | None) -> None:
        """A record that cannot be processed: a dead letter naming where it came from."""
        log.warning("[%s] %s[%d]@%d: %s", step_id, source.topic, source.partition, source.offset, reason)
        payload = bytes(value) if isinstance(value, bytes | bytearray | memoryview) else b""
        letter = DeadLetter(step_id, reason, payload, source_topic=source.topic,
                            source_partition=source.partition, source_offset=source.offset)
        if source.key:
            partition = partition_for(user_of_key(source.key), self.partitions)
        else:
            partition = source.partition % self.partitions
        self.metrics.rejects.labels(step_id).inc()
        self.dead_letters += 1
        await (await self._send(DLQ, source.key, letter, partition))

    def _count_call(self, result: WindowResult) -> None:
        call = result.call
        if call is None:
            return
        m = self.metrics
        m.model_calls.labels(call.model, call.outcome).inc(call.calls)
        m.model_tokens.labels(call.model, "prompt").inc(call.prompt_tokens)
        m.model_tokens.labels(call.model, "completion").inc(call.completion_tokens)
        m.model_cost.labels(call.model).inc(call.cost)

    def _update_gauge(self) -> None:
        self.pending_turns.set(self.pending)
