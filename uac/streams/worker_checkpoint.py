"""The checkpoint + constraint agent's logic, independent of faust: facts in, state and alerts out.

:class:`CheckpointAgent` is what the Kafka worker (:mod:`uac.streams.worker`) runs for every record of
``uac.facts`` (raw bytes). Per assigned partition it keeps an
:class:`~uac.streams.log.InMemoryFactLog`, a :class:`~uac.streams.kafka_store.PublishingStateStore`
and a :class:`~uac.checkpointer.checkpointer.Checkpointer` with the built-in rules. Decoded facts and
ticks are appended to the partition's log with window marks cut by a
:class:`~uac.checkpointer.windows.WindowPolicy` exactly as the embedded pipeline cuts them (a tick
closes a window; a tick at or before the partition's watermark is skipped; a fact already in the log
is skipped); a timer (:meth:`CheckpointAgent.close_idle`) closes a window that got no record for
``idle_timeout`` seconds. After a mark the partition's checkpointer runs, the collected outputs
(``uac.state``, ``uac.state-changes``, ``uac.alerts``; rule failures as dead letters on ``uac.dlq``)
are produced and awaited, and only then are the window's records acknowledged. An undecodable
record becomes a dead letter (step ``worker.decode``); a ``WindowMark`` on the topic is ignored.

State and takeovers: a partition's state lives in memory, and every ``uac.state`` record carries
the facts its entity is folded from. The first record of a partition this agent holds no state for
makes it *restore* the partition (:mod:`uac.streams.worker_restore`): it reads the partition of
``uac.state`` and ``uac.alerts`` to their ends and loads them; faust then delivers ``uac.facts`` from
the group's committed offset, which only moves once a window's outputs were produced (facts the
restored state already holds are skipped by id). A revoked partition's state is dropped
(:meth:`revoke`). Fact, alert and state ids are deterministic, so work done again after a crash
re-publishes identical records (compaction collapses ``uac.state``; ``uac.alerts`` and
``uac.state-changes`` may carry the same event twice, consumers dedupe by alert id and kind). Window
boundaries cut by the idle timer depend on wall time, so a run after a crash may cut different
windows (the same final state and alerts, possibly different event times).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from uac.checkpointer.checkpointer import Checkpointer, RuleSettings
from uac.checkpointer.windows import WindowPolicy, with_marks
from uac.domains.facts import Fact, LogRecord, Tick, WindowMark
from uac.errors import CodecError
from uac.executor.rules import Rule
from uac.metrics import Metrics
from uac.settings import Settings
from uac.streams.avro import AvroCodec, DeadLetter
from uac.streams.embedded import default_rules
from uac.streams.kafka_store import OutRecord, PublishingStateStore
from uac.streams.log import InMemoryFactLog
from uac.streams.rejects import InMemoryRejectStore, Reject
from uac.streams.topics import partition_for, user_key, user_of_key
from uac.streams.worker_extract import DLQ, FACTS, STEP_DECODE, Ack, Source, dead_letter, tick_key
from uac.streams.worker_restore import Restored

log = logging.getLogger(__name__)
STEP_FACTS = "checkpoint.facts"
CLOCK_USER = "_clock"
"""Wall-clock ticks on ``uac.facts`` are keyed ``_clock/_tick/<time>``: a tick is about no user, and
its key only keeps compaction from collapsing two ticks."""

SendRaw = Callable[[str, bytes | None, bytes | None, int], Awaitable[Awaitable[Any]]]
"""``await send(topic, key, value, partition)``: like :data:`~uac.streams.worker_extract.Send`, but
a None value (a tombstone) is allowed."""
RestoreFn = Callable[[int], Awaitable[Restored]]
"""``await restore(partition)``: the partition's state read back from the topics
(:func:`uac.streams.worker_restore.restore_batch` over ``read_partition`` of uac.state and uac.alerts)."""


class CollectingRejects(InMemoryRejectStore):
    """Rejects of the checkpointer (rule failures), kept until the agent sends them as dead letters."""

    def drain(self) -> list[Reject]:
        out, self.items = self.items, []
        return out


@dataclass(slots=True)
class _Partition:
    """One assigned partition of ``uac.facts``: its log, state, checkpointer and open window."""

    index: int
    log: InMemoryFactLog
    store: PublishingStateStore
    rejects: CollectingRejects
    checkpointer: Checkpointer
    policy: WindowPolicy
    next_window: int = 0
    watermark: datetime | None = None
    held: list[Ack] = field(default_factory=list)
    last_seen: float = 0.0


class CheckpointAgent:
    """Facts to state, state changes and alerts, per the module docstring. One per worker."""

    def __init__(self, send: SendRaw, *, settings: Settings, partitions: int, prefix: str = "",
                 rules: tuple[Rule, ...] | None = None, codec: AvroCodec | None = None,
                 metrics: Metrics | None = None, idle_timeout: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, restore: RestoreFn | None = None) -> None:
        self.send = send
        self.settings = settings
        self.partitions = partitions
        self.prefix = prefix
        self.rules = tuple(default_rules() if rules is None else rules)
        self.codec = codec or AvroCodec()
        self.metrics = metrics or Metrics()
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.restore = restore
        """None: a new partition starts empty (tests, or a deployment replaying uac.facts)."""
        self._parts: dict[int, _Partition] = {}
        self._assigned: set[int] = set()
        self._lock = asyncio.Lock()
        self._facts_in = self.metrics.records_in.labels(STEP_FACTS)
        self.records_sent = 0
        self.dead_letters = 0

    # -- partitions ------------------------------------------------------------------------------

    async def _partition(self, index: int) -> _Partition:
        """The partition's state; restored from the topics the first time (with ``restore``)."""
        part = self._parts.get(index)
        if part is not None:
            return part
        s = self.settings
        log_, store, rejects = InMemoryFactLog(), PublishingStateStore(self.partitions, codec=self.codec), \
            CollectingRejects()
        next_window = 0
        if self.restore is not None:
            started = time.perf_counter()
            restored = await self.restore(index)
            store.restore(restored.batch, restored.versions)
            next_window = restored.batch.checkpoint.window_id + 1
            log.info("restored partition %d in %.2f s: %d entities, %d facts, %d alert events", index,
                     time.perf_counter() - started, restored.entities, restored.facts,
                     restored.alert_events)
        checkpointer = Checkpointer(log_, store, rejects, self.rules,
                                    rule_settings=RuleSettings(s.rule_days_ahead, s.lapse_days_ahead),
                                    metrics=self.metrics)
        policy = WindowPolicy(s.window_facts, s.window_span)
        part = self._parts[index] = _Partition(index, log_, store, rejects, checkpointer, policy,
                                               next_window)
        return part

    def holds(self, partition: int) -> bool:
        """Whether this agent holds (has restored) the state of ``partition``."""
        return partition in self._parts

    async def take_over(self, partitions: set[int]) -> None:
        """Restore the state of newly assigned partitions now (not at their first new fact), so the
        query side can answer for them at once; failures are logged, the first fact tries again.
        A partition revoked meanwhile is skipped."""
        self._assigned.update(partitions)
        for index in sorted(partitions):
            try:
                async with self._lock:
                    if index in self._assigned:
                        await self._partition(index)
            except Exception as exc:  # a broker hiccup: on_fact restores it later
                log.warning("could not restore partition %d yet: %r", index, exc)

    async def revoke(self, partitions: set[int] | None = None) -> None:
        """Drop the state of these partitions (None: all), their open windows unacknowledged."""
        async with self._lock:
            for p in list(self._parts) if partitions is None else partitions:
                self._assigned.discard(p)
                part = self._parts.pop(p, None)
                if part is not None and part.held:
                    log.info("revoked partition %d: dropped %d record(s) of an open window", p,
                             len(part.held))

    def store(self, partition: int) -> PublishingStateStore | None:
        part = self._parts.get(partition)
        return None if part is None else part.store

    @property
    def pending(self) -> int:
        return sum(len(p.held) for p in self._parts.values())

    # -- inputs ----------------------------------------------------------------------------------

    async def on_fact(self, source: Source, value: bytes | None, ack: Ack) -> None:
        """One ``uac.facts`` record: into its partition's log (acknowledged once its window is out)."""
        self._facts_in.inc()
        if value is None:  # a tombstone (erasure): not handled by this slice
            ack()
            return
        try:
            record = self.codec.decode(FACTS, value)
        except CodecError as exc:
            await self._poison(STEP_DECODE, str(exc), source, value)
            ack()
            return
        if isinstance(record, WindowMark):  # the writer does not write marks today
            ack()
            return
        async with self._lock:
            part = await self._partition(source.partition)
            part.last_seen = self.clock()
            out = self._window_records(part, record)
            if out:
                part.log.append(out)
            marks = [i for i, r in enumerate(out) if isinstance(r, WindowMark)]
            if marks and marks[-1] < len(out) - 1:  # a mark closed the window, the record opened one
                await self._emit(part)
                part.held.append(ack)
                return
            part.held.append(ack)
            if marks:
                await self._emit(part)
            elif not part.policy.open:  # skipped record, nothing open: nothing to wait for
                self._ack_all(part)

    async def close_idle(self) -> int:
        """Close the open windows that got no record for ``idle_timeout`` seconds; the number closed."""
        closed = 0
        async with self._lock:
            now = self.clock()
            for part in self._parts.values():
                if part.policy.open and now - part.last_seen >= self.idle_timeout:
                    part.log.append([WindowMark(part.next_window, reason="idle")])
                    part.next_window += 1
                    part.policy.reset()
                    await self._emit(part)
                    closed += 1
        return closed

    def _window_records(self, part: _Partition, record: Fact | Tick) -> list[LogRecord]:
        """The log records for one input, with window marks (as ``EmbeddedPipeline._ingest_chunk``)."""
        out: list[LogRecord] = []
        if isinstance(record, Fact):
            if part.log.contains(record.fact_id) or part.store.has_fact(record.fact_id):
                self.metrics.facts_duplicate.inc()
                return out
            t = record.observed_time
        else:
            if part.watermark is not None and record.time <= part.watermark:
                # event time is already there: nothing to advance, but the tick still ends the open
                # window (as the end of a chunk does in the embedded pipeline): a window's facts then
                # leave with their own tick instead of waiting for the idle timer
                if not part.policy.open:
                    return out
                part.policy.reset()
                part.next_window += 1
                return [WindowMark(part.next_window - 1, reason="tick")]
            t = record.time
        if part.watermark is None or t > part.watermark:
            part.watermark = t
        out, part.next_window = with_marks(part.policy, record, part.next_window)
        return out

    async def clock_tick(self, at: datetime) -> int:
        """Produce a clock tick at ``at`` to ``uac.facts``, on every partition this agent holds (the
        optional wall-clock tick of a live deployment: time-based rules then run as the day passes
        even when no user writes). The tick is a record like any other, so a replay or a takeover
        sees the same event time. Returns the number of ticks sent."""
        tick = Tick(at)
        value = self.codec.encode(FACTS, tick)
        async with self._lock:
            held = sorted(self._parts)
        sent = [await self.send(self.prefix + FACTS, tick_key(CLOCK_USER, tick), value, p) for p in held]
        await asyncio.gather(*sent)
        return len(sent)

    # -- outputs ---------------------------------------------------------------------------------

    async def _emit(self, part: _Partition) -> None:
        """Fold the closed windows, produce their outputs, await them, ack their records.

        Only records of closed windows are held here (:meth:`on_fact`): an acknowledged offset gets
        committed, and a record of a window still open must be read again after a crash."""
        part.checkpointer.run(commit_every=None)
        records: list[OutRecord] = part.store.drain()
        sent: list[Awaitable[Any]] = []
        for r in records:
            sent.append(await self.send(self.prefix + r.topic, r.key, r.value, r.partition))
        for reject in part.rejects.drain():
            letter = DeadLetter.from_reject(reject)
            self.dead_letters += 1
            sent.append(await self.send(self.prefix + DLQ, None, self.codec.encode(DLQ, letter),
                                        part.index))
        await asyncio.gather(*sent)
        self.records_sent += len(records)
        self._ack_all(part)

    @staticmethod
    def _ack_all(part: _Partition) -> None:
        held, part.held = part.held, []
        for ack in held:
            ack()

    async def _poison(self, step_id: str, reason: str, source: Source, value: bytes | None) -> None:
        """A record that cannot be processed: a dead letter naming where it came from."""
        letter = dead_letter(step_id, reason, source, value)
        if source.key:
            user = user_of_key(source.key)
            key: bytes | None = user_key(user)
            partition = partition_for(user, self.partitions)
        else:
            key, partition = None, source.partition % self.partitions
        self.metrics.rejects.labels(step_id).inc()
        self.dead_letters += 1
        await (await self.send(self.prefix + DLQ, key, self.codec.encode(DLQ, letter), partition))

    # -- read accessors (the query side, :mod:`uac.streams.worker_query`) -------------------------

    def log_end(self, partition: int) -> int:
        """The end offset of the partition's in-memory log (0 without state)."""
        part = self._parts.get(partition)
        return 0 if part is None else part.log.end_offset()

    def folded_offset(self, partition: int) -> int:
        """How far the partition's log is folded into its state (its checkpoint's log offset)."""
        part = self._parts.get(partition)
        return 0 if part is None else part.store.checkpoint().log_offset
