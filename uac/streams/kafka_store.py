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


def batch_records(batch: CommitBatch, codec: AvroCodec, partitions: int) -> list[OutRecord]:
    """The Kafka records of a commit batch: entities, then state changes, then alert events."""
    out: list[OutRecord] = []
    for (user, etype, eid), row in batch.entities.items():
        out.append(OutRecord(STATE, state_key(user, etype, eid), codec.encode_entity(row),
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
    """An in-memory store whose commits also collect their outputs as Kafka records."""

    def __init__(self, partitions: int, *, codec: AvroCodec | None = None,
                 inner: InMemoryStateStore | None = None) -> None:
        self.partitions = partitions
        self.codec = codec or AvroCodec()
        self.inner = inner if inner is not None else InMemoryStateStore()
        self._pending: list[OutRecord] = []

    def drain(self) -> list[OutRecord]:
        """The records collected since the last drain (and forget them)."""
        out, self._pending = self._pending, []
        return out

    # -- the checkpointer's side -------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        return self.inner.checkpoint()

    def commit(self, batch: CommitBatch) -> None:
        records = batch_records(batch, self.codec, self.partitions)  # encode first: may raise
        self.inner.commit(batch)
        self._pending.extend(records)

    def load_facts(self, user_id: str) -> list[Fact]:
        return self.inner.load_facts(user_id)

    # -- the read side -----------------------------------------------------------------------
    def users(self) -> list[str]:
        return self.inner.users()

    def user_version(self, user_id: str) -> int:
        return self.inner.user_version(user_id)

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
