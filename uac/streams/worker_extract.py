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
consumer reads them again from the committed offset, here or on the partition's new owner). A turn
read again is not extracted again once its window is done: the window's closing tick, produced after
its facts, names the ``uac.turns`` offset of its last turn (:func:`tick_key`), the view keeps the
highest per user (also read back on assignment), and the turns up to it are acknowledged without a
model call (:meth:`ExtractionAgent._not_yet_extracted`). A model need not answer the same twice; the
records a window produced twice before its tick was out have the same keys (compaction collapses them).

What memory holds: each window is extracted with the manifest of the user's folded state, as the
embedded pipeline extracts it, so a correction can reuse an entity's id and name the facts it
supersedes. The state is the agent's :class:`~uac.streams.worker_view.FactView`: the facts it wrote
(folded in once the broker has them), and, for a partition it is assigned (:meth:`ExtractionAgent.assign`),
the facts already on ``uac.facts``, read back before any window of the partition is extracted (windows
closing meanwhile wait; a revoked partition's view is dropped and its waiting windows with it).

Open windows close by the :class:`~uac.extraction.windows.WindowPolicy` (session end, turns, chars,
span) and by :meth:`ExtractionAgent.close_idle` (a timer): a user whose window got no turn for
``idle_timeout`` seconds of wall time (the end of the input, as far as the worker can tell).

Concurrency: a closed window is extracted and produced in a task of its own, so the consumer reads on
while up to ``max_in_flight`` windows (:data:`MAX_IN_FLIGHT`) are in flight; at the bound,
:meth:`~ExtractionAgent.on_turn` waits for one to finish (backpressure, and bounded memory).

* Windows of one user run one after the other: a window's task first waits for the user's previous
  window, whose facts are folded into the view on the broker's ack, so its manifest holds them. If
  that one did not complete, the later one gives up too (unacknowledged). Windows of different users,
  on one partition or several, overlap, their model calls in a pool of ``max_in_flight`` threads.
* A window's records (its facts, the tick at its last turn, its rejects) are queued to the producer
  in one go, no other window's records between, so the tick follows the facts on the partition.
* Its turns are acknowledged as before, once all of those records are acknowledged by the broker: so
  out of order across users, which is fine, the worker commits the contiguous acknowledged offsets.
* :meth:`~ExtractionAgent.close_idle` waits for the windows it closes; while a partition's view is
  read back, a turn that closes one of its windows waits for that window (the consumer with it).
* :meth:`~ExtractionAgent.reset` drops the open windows, then waits for those in flight: a window of a
  revoked partition not yet extracted gives up, unacknowledged; the others are finished.
* A window that raises (the broker) is not acknowledged; the error is raised again by the next
  :meth:`~ExtractionAgent.on_turn` or :meth:`~ExtractionAgent.close_idle`, so the worker gets it as
  it got it from the call that closed the window when windows ran one at a time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
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
from uac.streams.worker_view import FactView, KeyedBatch

log = logging.getLogger(__name__)

TURNS, OBSERVATIONS, FACTS, DLQ = "uac.turns", "uac.observations", "uac.facts", "uac.dlq"
STEP_TURNS = "extract.turns"
STEP_OBSERVATIONS = "extract.observations"
STEP_DECODE = "worker.decode"
STEP_OBSERVATION = "worker.observation"
MAX_IN_FLIGHT = 16
"""Windows extracted and produced at once, by default (see the module docstring)."""

Send = Callable[[str, bytes | None, bytes, int], Awaitable[Awaitable[Any]]]
"""``await send(topic, key, value, partition)`` queues the record in the producer (records queued in
order stay in order per partition) and gives an awaitable that resolves once the broker has it."""
Ack = Callable[[], Any]
ReadFacts = Callable[[str, Collection[int]], AsyncGenerator[KeyedBatch, None]]
"""``read(topic, partitions)``: the records of ``uac.facts`` up to their end offsets, with their keys
(:func:`~uac.streams.worker_view.read_records` bound to a bootstrap address)."""


@dataclass(frozen=True, slots=True)
class Source:
    """Where a consumed record came from (the full topic name, with any prefix)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None


def dead_letter(step_id: str, reason: str, source: Source, value: bytes | None) -> DeadLetter:
    """The dead letter of a record that cannot be processed (logged): its bytes, the reason and
    where it came from."""
    log.warning("[%s] %s[%d]@%d: %s", step_id, source.topic, source.partition, source.offset, reason)
    payload = bytes(value) if isinstance(value, bytes | bytearray | memoryview) else b""
    return DeadLetter(step_id, reason, payload, source_topic=source.topic,
                      source_partition=source.partition, source_offset=source.offset)


def tick_key(user_id: str, at: Tick, through: int | None = None) -> bytes:
    """The ``uac.facts`` key of a tick: under the user's key, ``_tick/<iso time>``. A fact id is hex,
    so it never collides with a fact; compaction only collapses the very same tick sent twice.

    The tick that ends an extraction window also names the ``uac.turns`` offset of the window's last
    turn (``through``): ``_tick/<iso time>/<offset>``. Once it is on ``uac.facts``, so are the
    window's facts (sent before it, in order), and the turns up to that offset are extracted."""
    key = user_key(user_id) + b"/_tick/" + iso(at.time).encode()
    return key if through is None else key + b"/" + str(through).encode()


def extracted_through(key: bytes) -> tuple[str, int] | None:
    """(user, offset) of a window's closing tick key (see :func:`tick_key`); None for other keys."""
    head, sep, tail = key.partition(b"/_tick/")
    stamp, slash, offset = tail.rpartition(b"/")
    if not sep or not slash or not offset.isdigit() or not stamp:
        return None
    return user_of_key(head), int(offset)


def _done_well(task: asyncio.Task[bool]) -> bool:
    """A finished window task did its window (not cancelled, no error, not given up)."""
    return not task.cancelled() and task.exception() is None and task.result()


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
                 clock: Callable[[], float] = time.monotonic, offload: bool = True,
                 read: ReadFacts | None = None, retry_delay: float = 1.0,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
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
        self.max_in_flight = max_in_flight
        self.read = read
        """Reads ``uac.facts`` back on assignment (None: a partition starts empty and ready)."""
        self.retry_delay = retry_delay
        self.view = FactView(partitions)
        self._slots: dict[tuple[int, str], _Slot] = {}
        self._pending = 0
        """Turns held in open windows (the sum of the slots' ``held``, kept as they change)."""
        self._flight: set[asyncio.Task[bool]] = set()
        self._last: dict[tuple[int, str], asyncio.Task[bool]] = {}
        """Per (partition, user): the task of the user's latest window still in flight."""
        self._failure: BaseException | None = None
        self._queueing = asyncio.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._observing = asyncio.Lock()
        self._revoked: set[int] = set()
        self._rebuilds: dict[asyncio.Task[None], set[int]] = {}
        self.pending_turns = Gauge("uac_worker_pending_turns", "Turns waiting in open extraction windows",
                                   registry=self.metrics.registry)
        self.windows_in_flight = Gauge("uac_worker_windows_in_flight",
                                       "Extraction windows closed and not yet done",
                                       registry=self.metrics.registry)
        self._turns_in = self.metrics.records_in.labels(STEP_TURNS)
        self._observations_in = self.metrics.records_in.labels(STEP_OBSERVATIONS)
        self.dead_letters = 0
        self.facts_sent = 0
        self.turns_skipped = 0
        """Turns read again that were extracted before (see :meth:`_not_yet_extracted`)."""

    # -- inputs ----------------------------------------------------------------------------------

    async def on_observation(self, source: Source, value: bytes | None, ack: Ack) -> None:
        """One ``uac.observations`` record: its fact or tick on ``uac.facts``, or a dead letter."""
        async with self._observing:  # a rebalance waits for it (reset): its fact is then on the log
            await self._observe(source, value, ack)

    async def _observe(self, source: Source, value: bytes | None, ack: Ack) -> None:
        self._observations_in.inc()
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
            self.view.fold_in(record)
            self.facts_sent += 1
            self.metrics.facts_appended.inc()
        ack()

    async def on_turn(self, source: Source, value: bytes | None, ack: Ack) -> None:
        """One ``uac.turns`` record: into its user's window; a window it closes is started (its turns
        are acknowledged when its outputs are out). Returns once fewer than ``max_in_flight`` windows
        are in flight (see the module docstring)."""
        self._raise_failure()
        self._turns_in.inc()
        try:
            turn = self.codec.decode_as(TURNS, value, Turn)  # type: ignore[arg-type]
        except CodecError as exc:
            await self._poison(STEP_DECODE, str(exc), source, value)
            ack()
            return
        slot_key = (source.partition, turn.user_id)
        slot = self._slots.get(slot_key)
        if slot is None:
            slot = self._slots[slot_key] = _Slot(TurnWindows(self.policy))
        closed = slot.windows.add(turn)
        slot.held.append(_Held(source, ack))
        self._pending += 1
        slot.last_seen = self.clock()
        started = [self._start(slot_key, slot, window) for window in closed]
        if not slot.held:
            del self._slots[slot_key]
        self._update_gauge()
        if started and not self.view.ready(source.partition):
            await asyncio.wait(started)  # its view is being read back: nothing goes on before it is
        await self._room()

    async def close_idle(self) -> int:
        """Close the windows that got no turn for ``idle_timeout`` seconds and wait for them; the
        number done (one given up, its partition revoked meanwhile, does not count)."""
        self._raise_failure()
        now, started = self.clock(), []
        for slot_key in [k for k, s in self._slots.items() if now - s.last_seen >= self.idle_timeout]:
            await self._room()
            slot = self._slots.get(slot_key)
            if slot is None or now - slot.last_seen < self.idle_timeout:
                continue  # dropped, or a new turn came meanwhile
            started += [self._start(slot_key, slot, window) for window in slot.windows.flush()]
            if not slot.held:
                del self._slots[slot_key]
        self._update_gauge()
        if started:
            await asyncio.wait(started)
        return sum(1 for task in started if _done_well(task))

    async def reset(self, revoked: Collection[int] = ()) -> None:
        """Forget every open window without acknowledging its turns (a rebalance: they are read again
        from the committed offsets), and the views of the ``revoked`` partitions (their windows
        waiting for a rebuild give up); then wait for the windows in flight (one of a revoked
        partition not yet extracted gives up, unacknowledged; the others are finished)."""
        self._revoked.update(revoked)
        for partition in revoked:
            self.view.drop(partition)
        for task, partitions in list(self._rebuilds.items()):
            if partitions <= self._revoked:
                task.cancel()
        dropped = self.pending
        self._slots.clear()
        self._pending = 0
        self._update_gauge()
        async with self._observing:
            await self.drain()
        if dropped:
            log.info("rebalance: dropped %d turn(s) of open windows; they will be read again", dropped)

    async def drain(self) -> None:
        """Wait until no window is in flight."""
        while self._flight:
            await asyncio.wait(self._flight)

    def assign(self, partitions: Collection[int]) -> None:
        """The worker got these partitions: rebuild their views from ``uac.facts`` (in a task; until
        it is done, their windows wait)."""
        generations = {p: self.view.assign(p) for p in partitions}
        self._revoked.difference_update(partitions)
        if not generations:
            return
        if self.read is None:
            for p, g in generations.items():
                self.view.done(p, g)
            return
        task = asyncio.get_running_loop().create_task(self._rebuild(generations))
        self._rebuilds[task] = set(generations)
        task.add_done_callback(lambda t: self._rebuilds.pop(t, None))

    async def _ready(self, partition: int) -> bool:
        """Wait for the partition's view: False if it was revoked. A partition seen before the
        worker's assignment signal is assigned now."""
        if partition in self._revoked:
            return False
        if partition not in self.view:
            self.assign([partition])
        return await self.view.wait(partition)

    async def _rebuild(self, generations: dict[int, int]) -> None:
        """Fold what ``uac.facts`` holds for these partitions (partition: view generation) into the
        view, then mark each ready; retried (from offset 0: folding twice changes nothing)."""
        assert self.read is not None
        while True:
            started, counts = time.monotonic(), dict.fromkeys(generations, 0)
            try:
                async with aclosing(self.read(self.prefix + FACTS, list(generations))) as batches:
                    async for partition, records, at_end in batches:
                        facts, through = self._read_back(partition, records)
                        counts[partition] += self.view.rebuild(partition, facts, generations[partition],
                                                               through)
                        if at_end and self.view.done(partition, generations[partition]):
                            log.info("partition %d: %d fact(s) read back from %s%s in %.2f s", partition,
                                     counts[partition], self.prefix, FACTS, time.monotonic() - started)
                        if not any(self.view.current(p, g) for p, g in generations.items()):
                            return  # every partition was dropped or assigned again
                return
            except Exception as exc:  # the broker: try again (CancelledError is not an Exception)
                log.warning("reading %s%s back failed (%s); again in %.1f s", self.prefix, FACTS, exc,
                            self.retry_delay)
                await asyncio.sleep(self.retry_delay)

    def _read_back(self, partition: int, records: list[tuple[int, bytes | None, bytes | None]]
                   ) -> tuple[list[Fact], list[tuple[str, int]]]:
        """The facts among records read back (tombstones, ticks and marks skipped; an undecodable
        record skipped with a log line), and the (user, ``uac.turns`` offset) each window's closing
        tick names (see :func:`tick_key`)."""
        facts, through = [], []
        for offset, key, value in records:
            if key and (window_end := extracted_through(key)) is not None:
                through.append(window_end)
            if value is None:
                continue
            try:
                record = self.codec.decode(FACTS, value)
            except CodecError as exc:
                log.warning("skipping %s%s[%d]@%d: %s", self.prefix, FACTS, partition, offset, exc)
                continue
            if isinstance(record, Fact):
                facts.append(record)
        return facts, through

    @property
    def pending(self) -> int:
        return self._pending

    # -- outputs ---------------------------------------------------------------------------------

    def _start(self, slot_key: tuple[int, str], slot: _Slot, window: Sequence[Turn]) -> asyncio.Task[bool]:
        """Start a closed window's task (:meth:`_window`), after the user's previous window."""
        held = slot.held[:len(window)]
        del slot.held[:len(window)]
        self._pending -= len(held)
        task = asyncio.get_running_loop().create_task(
            self._window(slot_key[0], window, held, self._last.get(slot_key)))
        self._last[slot_key] = task
        self._flight.add(task)
        task.add_done_callback(functools.partial(self._finished, slot_key))
        return task

    def _finished(self, slot_key: tuple[int, str], task: asyncio.Task[bool]) -> None:
        self._flight.discard(task)
        if self._last.get(slot_key) is task:
            del self._last[slot_key]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("user %s: extraction window failed: %r", slot_key[1], exc)
            self._failure = self._failure or exc
        self._update_gauge()

    def _raise_failure(self) -> None:
        """Raise the error of a window that failed (once)."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    async def _room(self) -> None:
        """Wait until fewer than ``max_in_flight`` windows are in flight."""
        while len(self._flight) >= self.max_in_flight:
            await asyncio.wait(self._flight, return_when=asyncio.FIRST_COMPLETED)

    async def _window(self, partition: int, window: Sequence[Turn], held: list[_Held],
                      previous: asyncio.Task[bool] | None) -> bool:
        """A closed window, once the user's ``previous`` window is done and the partition's view is
        ready: extract it with the user's state, produce its facts, tick and rejects, fold its facts
        into the view, then ack its turns. False: given up (the previous window was not done, or the
        partition was revoked), nothing acknowledged."""
        if previous is not None:
            await asyncio.wait([previous])
            if not _done_well(previous):
                log.warning("user %s: window given up, the previous one was not done", window[0].user_id)
                return False
        if not await self._ready(partition):
            return False
        window, held = self._not_yet_extracted(window, held)
        if not window:
            return True
        # the manifest is built here: the state may change while the model runs in a thread
        result = await self._extract(window, self.extractor.manifest(self.view.state_for(window)))
        self._count_call(result)
        await self._produce(window, held, result)
        for fact in result.facts:
            self.view.fold_in(fact)
        self.view.extracted(window[0].user_id, held[-1].source.offset)
        self.facts_sent += len(result.facts)
        self.metrics.facts_appended.inc(len(result.facts))
        for h in held:
            h.ack()
        return True

    def _not_yet_extracted(self, window: Sequence[Turn], held: list[_Held]
                           ) -> tuple[Sequence[Turn], list[_Held]]:
        """The window without its turns extracted before (read again after a crash or a rebalance:
        their window's closing tick is on ``uac.facts``), which are acknowledged. A model need not
        answer the same twice, so a turn is extracted once."""
        through = self.view.through(window[0].user_id)
        done = sum(1 for h in held if h.source.offset <= through)
        if done:
            log.info("user %s: %d turn(s) read again were extracted before (through offset %d); "
                     "not extracted again", window[0].user_id, done, through)
            self.turns_skipped += done
            for h in held[:done]:
                h.ack()
        return window[done:], held[done:]

    async def _extract(self, window: Sequence[Turn], manifest: list[dict[str, Any]]) -> WindowResult:
        """The model call: in a thread of the agent's pool (``offload``), or inline."""
        if not self.offload:
            return self.extractor.extract(window, manifest=manifest)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="uac-extract")
        call = functools.partial(self.extractor.extract, window, manifest=manifest)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    async def _produce(self, window: Sequence[Turn], held: Sequence[_Held], result: WindowResult) -> None:
        """Queue a window's facts, then the tick at its last turn (keyed with that turn's offset), then
        its rejects (dead letters naming the record of its first turn), in one go; then wait until
        the broker has all."""
        user, first = window[0].user_id, held[0].source
        partition = partition_for(user, self.partitions)
        last = Tick(max(t.timestamp for t in window))
        async with self._queueing:
            sent = [await self._send_fact(fact) for fact in result.facts]
            sent.append(await self._send(FACTS, tick_key(user, last, held[-1].source.offset), last,
                                         partition))
            for reject in result.rejects:
                letter = dataclasses.replace(DeadLetter.from_reject(reject), source_topic=first.topic,
                                             source_partition=first.partition, source_offset=first.offset)
                self.metrics.rejects.labels(reject.step_id).inc()
                self.dead_letters += 1
                sent.append(await self._send(DLQ, user_key(user), letter, partition))
        await asyncio.gather(*sent)

    async def _send_fact(self, fact: Fact) -> Awaitable[Any]:
        return await self._send(FACTS, fact_key(fact.user_id, fact.fact_id), fact,
                          partition_for(fact.user_id, self.partitions))

    async def _send(self, base: str, key: bytes | None, record: object, partition: int) -> Awaitable[Any]:
        return await self.send(self.prefix + base, key, self.codec.encode(base, record), partition)

    async def _poison(self, step_id: str, reason: str, source: Source, value: bytes | None) -> None:
        """A record that cannot be processed: a dead letter naming where it came from."""
        letter = dead_letter(step_id, reason, source, value)
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
        self.windows_in_flight.set(len(self._flight))
