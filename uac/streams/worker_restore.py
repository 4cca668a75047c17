"""Taking over a partition: its state read back from ``uac.state`` and ``uac.alerts``.

A worker that gets a partition of ``uac.facts`` does not replay the whole topic. It reads the same
partition of ``uac.state`` (compacted: the latest record of every entity, each carrying every fact
about the entity, schema version 2) and of ``uac.alerts`` (the alert history), builds a
:class:`~uac.checkpointer.records.CommitBatch` from them (:func:`restore_batch`, pure), loads it into
the partition's store, and then folds only the facts after the consumer group's committed offset of
``uac.facts`` (committed only once a window's outputs were produced, so nothing between is lost;
facts the state already holds are skipped by id).

:func:`read_partition` reads a partition to its end offset at the time of the call with a plain
aiokafka consumer (no group, nothing committed).

Limits, by design of a compacted changelog: an entity that ceased to exist is a tombstone, so its
facts are not restored; a later fact that revives it (superseding its retraction) starts from the
facts after the takeover. A user's state version continues from the highest version among its live
entity records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from uac.checkpointer.records import Checkpoint, CommitBatch, EntityRow
from uac.domains.facts import Fact
from uac.errors import CodecError
from uac.executor.alerts import AlertEvent
from uac.streams.avro import AvroCodec

log = logging.getLogger(__name__)
STEP_RESTORE = "worker.restore"
RESTORED_WINDOW = 0
"""The window id a restored checkpoint carries (the partition's next window is 1)."""

RawRecord = tuple[bytes | None, bytes | None]
"""(key, value) of one record as read from a topic."""


@dataclass(slots=True)
class Restored:
    """A partition's state as read back from the topics, ready for ``PublishingStateStore.restore``."""

    batch: CommitBatch
    versions: dict[str, int] = field(default_factory=dict)
    entities: int = 0
    facts: int = 0
    alert_events: int = 0
    without_facts: int = 0
    """Live entity records written without their facts (schema version 1): not restorable."""
    undecodable: int = 0


def restore_batch(state: Iterable[RawRecord], alerts: Iterable[RawRecord],
                  codec: AvroCodec | None = None) -> Restored:
    """The commit batch that recreates a partition from its ``uac.state`` and ``uac.alerts``
    records (in topic order; the latest record of a key wins, a tombstone removes it)."""
    codec = codec or AvroCodec()
    latest: dict[bytes, bytes | None] = {}
    undecodable = 0
    for key, value in state:
        if key is None:
            undecodable += 1
            continue
        latest[key] = value
    rows: dict[tuple[str, str, str], EntityRow] = {}
    facts: dict[str, Fact] = {}
    versions: dict[str, int] = {}
    without = 0
    for key, value in latest.items():
        if value is None:
            continue
        try:
            record = codec.decode_state(key, value)
        except CodecError as exc:
            log.warning("[%s] uac.state record %r not restored: %s", STEP_RESTORE, key, exc)
            undecodable += 1
            continue
        row = record.row
        rows[(row.user_id, row.entity_type, row.entity_id)] = row
        versions[row.user_id] = max(versions.get(row.user_id, 0), row.state_version)
        without += not record.facts
        for fact in record.facts:
            facts[fact.fact_id] = fact
    events, undecodable = _alert_events(alerts, codec, undecodable)
    watermark = _watermark(facts.values(), events)
    batch = CommitBatch(Checkpoint(0, RESTORED_WINDOW, watermark, len(events)))
    batch.facts = [(-1, f, b"") for _, f in sorted(facts.items())]
    batch.entities = dict(sorted(rows.items()))
    batch.alert_events = [(seq, RESTORED_WINDOW, e) for seq, e in enumerate(events, start=1)]
    if without:
        log.warning("[%s] %d entity record(s) carry no facts (written by schema version 1): they "
                    "cannot be restored; reset the group's offsets of uac.facts to the earliest to "
                    "rebuild from the facts", STEP_RESTORE, without)
    return Restored(batch, versions, len(rows), len(facts), len(events), without, undecodable)


def _alert_events(alerts: Iterable[RawRecord], codec: AvroCodec,
                  undecodable: int) -> tuple[list[AlertEvent], int]:
    """The alert events in topic order, a re-published duplicate (same alert, kind, time) once."""
    events: list[AlertEvent] = []
    seen: set[tuple[str, str, datetime]] = set()
    for key, value in alerts:
        if value is None:
            continue
        try:
            event = codec.decode_as("uac.alerts", value, AlertEvent)
        except CodecError as exc:
            log.warning("[%s] uac.alerts record %r not restored: %s", STEP_RESTORE, key, exc)
            undecodable += 1
            continue
        mark = (event.alert.alert_id, event.kind.value, event.at)
        if mark not in seen:
            seen.add(mark)
            events.append(event)
    return events, undecodable


def _watermark(facts: Iterable[Fact], events: list[AlertEvent]) -> datetime | None:
    times = [f.observed_time for f in facts] + [e.at for e in events]
    return max(times, default=None)


async def read_partition(bootstrap: str, topic: str, partition: int, *,
                         timeout: float = 60.0) -> list[RawRecord]:
    """Every record of ``topic[partition]`` up to its end offset at the time of the call."""
    import asyncio

    from uac.streams.worker_view import read_records

    async def collect() -> list[RawRecord]:
        out: list[RawRecord] = []
        async for _, records, _ in read_records(bootstrap, topic, [partition]):
            out.extend((key, value) for _, key, value in records)
        return out

    try:
        return await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise TimeoutError(f"reading {topic}[{partition}] to its end offset took over {timeout} s") from None
