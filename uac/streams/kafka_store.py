"""A state store that also publishes each commit's outputs to the Kafka topics.

:class:`PublishingStateStore` wraps an :class:`~uac.checkpointer.store.InMemoryStateStore`: on
``commit(batch)`` it first turns the batch's outputs into Kafka records, then delegates. The caller
(the checkpoint agent, :mod:`uac.streams.worker_checkpoint`) takes the collected records with
:meth:`PublishingStateStore.drain` after ``Checkpointer.run()`` returns, produces them and awaits
them before acknowledging the facts of the window.

Records, every one partitioned with ``partition_for(user, partitions)`` (co-partitioned):

* ``uac.state``: key ``state_key(user, type, id)``, value the entity, or None (the tombstone) when
  the entity no longer exists;
* ``uac.state-changes``: key ``user_key(user)``, the window's :class:`StateChange`;
* ``uac.alerts``: key ``user_key(user)``, each :class:`AlertEvent` in sequence order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from uac.checkpointer.records import Checkpoint, CommitBatch, EntityRow, StateChange
from uac.checkpointer.store import InMemoryStateStore, StateStore
from uac.domains.facts import Fact
from uac.executor.alerts import Alert, AlertEvent
from uac.streams.avro import AvroCodec
from uac.streams.topics import partition_for, state_key, user_key

STATE, STATE_CHANGES, ALERTS = "uac.state", "uac.state-changes", "uac.alerts"


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record to produce: the base topic (no prefix), key, value (None: tombstone), partition."""

    topic: str
    key: bytes
    value: bytes | None
    partition: int


EntityFacts = dict[tuple[str, str, str], dict[str, Fact]]
"""(user, entity type, entity id) -> fact id -> fact: every fact about each entity."""


def batch_records(batch: CommitBatch, codec: AvroCodec, partitions: int,
                  facts_of: EntityFacts | None = None) -> list[OutRecord]:
    """The Kafka records of a commit batch: entities (each with every fact about it, from
    ``facts_of``), then state changes, then alert events."""
    out: list[OutRecord] = []
    facts_of = facts_of or {}
    for (user, etype, eid), row in batch.entities.items():
        about = list(facts_of.get((user, etype, eid), {}).values())
        out.append(OutRecord(STATE, state_key(user, etype, eid), codec.encode_entity(row, about),
                             partition_for(user, partitions)))
    for change in batch.state_changes:
        out.append(OutRecord(STATE_CHANGES, user_key(change.user_id), codec.encode(STATE_CHANGES, change),
                             partition_for(change.user_id, partitions)))
    for _seq, _window, event in sorted(batch.alert_events, key=lambda e: e[0]):
        user = event.alert.user_id
        out.append(OutRecord(ALERTS, user_key(user), codec.encode(ALERTS, event),
                             partition_for(user, partitions)))
    return out


class PublishingStateStore(StateStore):
    """An in-memory store whose commits also collect their outputs as Kafka records.

    It indexes every fact by its entity, so each ``uac.state`` record carries the facts its entity
    is folded from; :meth:`restore` loads what a takeover read back from the topics."""

    def __init__(self, partitions: int, *, codec: AvroCodec | None = None,
                 inner: InMemoryStateStore | None = None) -> None:
        self.partitions = partitions
        self.codec = codec or AvroCodec()
        self.inner = inner if inner is not None else InMemoryStateStore()
        self._pending: list[OutRecord] = []
        self._facts_of: EntityFacts = {}
        self._fact_ids: set[str] = set()
        self._restored_versions: dict[str, int] = {}

    def restore(self, batch: CommitBatch, versions: dict[str, int]) -> None:
        """Load a partition's state read back from ``uac.state`` and ``uac.alerts`` (its facts,
        entities, alert events and checkpoint), publishing nothing; ``versions``: each user's
        latest state version seen."""
        self._index(batch)
        self.inner.commit(batch)
        self._restored_versions.update(versions)

    def has_fact(self, fact_id: str) -> bool:
        """Whether the store already holds this fact (e.g. a restored one, read again from
        ``uac.facts`` after the last committed offset)."""
        return fact_id in self._fact_ids

    def _index(self, batch: CommitBatch) -> None:
        facts_of, ids = self._facts_of, self._fact_ids
        for _, fact, _ in batch.facts:
            facts_of.setdefault((fact.user_id, fact.entity_type, fact.entity_id), {})[fact.fact_id] = fact
            ids.add(fact.fact_id)

    def drain(self) -> list[OutRecord]:
        """The records collected since the last drain (and forget them)."""
        out, self._pending = self._pending, []
        return out

    # -- the checkpointer's side -------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        return self.inner.checkpoint()

    def commit(self, batch: CommitBatch) -> None:
        self._index(batch)
        records = batch_records(batch, self.codec, self.partitions, self._facts_of)  # may raise
        self.inner.commit(batch)
        self._pending.extend(records)

    def load_facts(self, user_id: str) -> list[Fact]:
        return self.inner.load_facts(user_id)

    # -- the read side -----------------------------------------------------------------------
    def users(self) -> list[str]:
        return self.inner.users()

    def user_version(self, user_id: str) -> int:
        return max(self.inner.user_version(user_id), self._restored_versions.get(user_id, 0))

    def entities(self, user_id: str) -> list[EntityRow]:
        return self.inner.entities(user_id)

    def alerts(self, user_id: str) -> list[Alert]:
        return self.inner.alerts(user_id)

    def alert_events(self, user_id: str) -> list[tuple[int, int, AlertEvent]]:
        return self.inner.alert_events(user_id)

    def state_changes(self, user_id: str) -> list[StateChange]:
        return self.inner.state_changes(user_id)

    def users_with_types(self, entity_types: Iterable[str]) -> list[str]:
        return self.inner.users_with_types(entity_types)
