"""What memory holds per user, as the worker's extraction agent sees it: facts folded per partition.

The extraction prompt's manifest (:meth:`~uac.extraction.extractor.Extractor.manifest`) is built from
the user's folded state, as in the embedded pipeline. In the worker every fact of a user is written by
the owner of the user's partition (``uac.turns``, ``uac.observations`` and ``uac.facts`` are
co-partitioned by user, :func:`~uac.streams.topics.partition_for`), so the owner keeps that state
itself, in a :class:`FactView`:

* write-through: each fact the agent writes is folded in once the broker has it (:meth:`FactView.fold_in`);
* rebuild: a partition the worker gets is not ready until the facts already on ``uac.facts`` for it
  (offset 0 to its end offset at assignment, :func:`read_records`) are folded in
  (:meth:`FactView.rebuild`, :meth:`FactView.done`); extraction waits for it (:meth:`FactView.wait`);
* a revoked partition is dropped (:meth:`FactView.drop`); whoever waits for it learns so.

The fold (:mod:`uac.checkpointer.fold`) is idempotent and order-independent, so a fact folded in while
its partition is rebuilt, or read twice, changes nothing. Ticks fold to nothing and are skipped.

Replays: turns read again after a crash or a rebalance are not extracted again up to the offset the
user's latest window tick names (:meth:`FactView.through`). A window cut anew whose first turns were
extracted before finds their facts (and later ones) already folded. :meth:`FactView.state_for`
leaves out the extracted facts observed at or after the window's first turn, so the window is
extracted with the state it had the first time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from uac.checkpointer.fold import apply_fact, bulk_gc, fold
from uac.checkpointer.state import UserState
from uac.domains.facts import Fact
from uac.extraction.extractor import SOURCE_PREFIX
from uac.extraction.turns import Turn
from uac.streams.topics import partition_for

log = logging.getLogger(__name__)

KeyedBatch = tuple[int, list[tuple[int, bytes | None, bytes | None]], bool]
"""What :func:`read_records` yields: (partition, [(offset, key, value)], whether it is read)."""


@dataclass(slots=True)
class _Partition:
    generation: int
    states: dict[str, UserState] = field(default_factory=dict)
    latest: dict[str, datetime] = field(default_factory=dict)
    """Per user: the latest observed time of an extracted fact (see :meth:`FactView.state_for`)."""
    through: dict[str, int] = field(default_factory=dict)
    """Per user: the ``uac.turns`` offset up to which turns are extracted (see :meth:`FactView.through`)."""
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def note_extracted(self, user_id: str, offset: int) -> None:
        """The user's turns up to ``offset`` are extracted (the highest offset is kept)."""
        if offset > self.through.get(user_id, -1):
            self.through[user_id] = offset


class FactView:
    """Per-partition, per-user folded facts (see the module docstring)."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._parts: dict[int, _Partition] = {}
        self._generation = 0

    def __contains__(self, partition: int) -> bool:
        return partition in self._parts

    @property
    def held(self) -> list[int]:
        """The partitions held (ready or not)."""
        return sorted(self._parts)

    def assign(self, partition: int) -> int:
        """Hold ``partition`` afresh, empty and not ready (replacing what was held); its generation,
        which :meth:`rebuild` and :meth:`done` name so that a stale rebuild changes nothing."""
        self.drop(partition)
        self._generation += 1
        self._parts[partition] = _Partition(self._generation)
        return self._generation

    def current(self, partition: int, generation: int) -> bool:
        part = self._parts.get(partition)
        return part is not None and part.generation == generation

    def rebuild(self, partition: int, facts: Iterable[Fact], generation: int,
                through: Iterable[tuple[str, int]] = ()) -> int:
        """Fold facts read from ``uac.facts`` into the partition, and note the turns their windows'
        ticks say are extracted (``through``: (user, offset) pairs); the number folded (0 if stale)."""
        part = self._parts.get(partition)
        if part is None or part.generation != generation:
            return 0
        for user, offset in through:
            part.note_extracted(user, offset)
        n = 0
        with bulk_gc():
            for fact in facts:
                self._fold(part, fact)
                n += 1
        return n

    def done(self, partition: int, generation: int) -> bool:
        """The partition's rebuild is complete: it is ready. False if stale."""
        if not self.current(partition, generation):
            return False
        self._parts[partition].ready.set()
        return True

    def ready(self, partition: int) -> bool:
        part = self._parts.get(partition)
        return part is not None and part.ready.is_set()

    def drop(self, partition: int) -> None:
        """Forget the partition; whoever waits for it (:meth:`wait`) gets False."""
        part = self._parts.pop(partition, None)
        if part is not None:
            part.ready.set()

    async def wait(self, partition: int) -> bool:
        """Wait until the partition is ready: True, or False if it is not held (or dropped meanwhile)."""
        part = self._parts.get(partition)
        if part is None:
            return False
        await part.ready.wait()
        return self._parts.get(partition) is part

    def fold_in(self, fact: Fact) -> bool:
        """Fold a fact just written into its user's state; False if its partition is not held."""
        part = self._parts.get(partition_for(fact.user_id, self.partitions))
        if part is None:
            return False
        self._fold(part, fact)
        return True

    def extracted(self, user_id: str, offset: int) -> None:
        """The user's turns up to ``uac.turns`` offset ``offset`` are extracted (their window's
        outputs are on ``uac.facts``)."""
        part = self._parts.get(partition_for(user_id, self.partitions))
        if part is not None:
            part.note_extracted(user_id, offset)

    def through(self, user_id: str) -> int:
        """The ``uac.turns`` offset up to which the user's turns are extracted (-1: none known).
        A turn at or below it that is read again (after a crash or a rebalance) is not extracted
        again: the window's closing tick, sent after its facts, names it (see
        :func:`~uac.streams.worker_extract.tick_key`)."""
        part = self._parts.get(partition_for(user_id, self.partitions))
        return -1 if part is None else part.through.get(user_id, -1)

    def state(self, user_id: str) -> UserState | None:
        """The user's folded state (None: nothing known, or the partition is not held)."""
        part = self._parts.get(partition_for(user_id, self.partitions))
        return None if part is None else part.states.get(user_id)

    def state_for(self, turns: Sequence[Turn]) -> UserState | None:
        """The user's state to extract a window of ``turns`` with: the whole state, unless it holds
        extracted facts observed at or after the window's first turn (the window is a replay, see the
        module docstring); those are left out (one at that very time but from other turns stays)."""
        user_id = turns[0].user_id
        part = self._parts.get(partition_for(user_id, self.partitions))
        state = None if part is None else part.states.get(user_id)
        first = min(t.timestamp for t in turns)
        if state is None or part is None or part.latest.get(user_id, first) < first:
            return state
        ids = {t.turn_id for t in turns}
        keep = [f for f in state.all_facts() if not f.source.startswith(SOURCE_PREFIX)
                or f.observed_time < first or (f.observed_time == first and ids.isdisjoint(f.provenance))]
        keep.sort(key=lambda f: f.order_key)
        log.info("user %s: a window from %s is read again; extracting it without %d later fact(s)",
                 user_id, first.isoformat(), sum(1 for _ in state.all_facts()) - len(keep))
        return fold(keep).get(user_id) or UserState(user_id)

    @staticmethod
    def _fold(part: _Partition, fact: Fact) -> None:
        user = part.states.get(fact.user_id)
        if user is None:
            user = part.states[fact.user_id] = UserState(fact.user_id)
        apply_fact(user, fact)
        if fact.source.startswith(SOURCE_PREFIX):
            latest = part.latest.get(fact.user_id)
            if latest is None or fact.observed_time > latest:
                part.latest[fact.user_id] = fact.observed_time


async def read_records(bootstrap: str, topic: str, partitions: Collection[int], *,
                       max_records: int = 5000) -> AsyncGenerator[KeyedBatch, None]:
    """The records of ``topic``'s ``partitions`` from offset 0 to their end offsets at the call, in
    batches (see :data:`KeyedBatch`); a consumer of its own (no group, nothing committed)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        left = set()
        for tp in tps:
            if await consumer.position(tp) >= ends[tp]:
                yield tp.partition, [], True
            else:
                left.add(tp)
        while left:
            batch = await consumer.getmany(*left, timeout_ms=500, max_records=max_records)
            for tp, records in batch.items():
                end = ends[tp]
                at_end = await consumer.position(tp) >= end
                yield tp.partition, [(r.offset, r.key, r.value) for r in records if r.offset < end], at_end
                if at_end:
                    left.discard(tp)
    finally:
        await consumer.stop()
