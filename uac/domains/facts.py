"""Facts: the typed, immutable records on the log. Pure: no I/O.

A fact is an operation (assert or retract) on one entity of a user, with the
time it is true in the world (``valid_time``), the time uac learned it
(``observed_time``), a confidence and its provenance (the ids of the turns or
observations it came from). Its id is derived from content and provenance, so
re-ingesting the same source yields the same id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any, TypeAlias

import orjson

JsonValue: TypeAlias = Any
"""A JSON-compatible value: str, int, float, bool, None, list or dict of those."""

FACT_VERSION = 1


class Op(StrEnum):
    """What a fact does to its entity."""

    ASSERT = "assert"
    """Set the given attributes (create the entity if needed)."""
    RETRACT = "retract"
    """The entity ceases to exist as of the valid time (a later assert revives it)."""


def to_utc(value: datetime | date | str) -> datetime:
    """Parse or normalise a time to an aware UTC datetime (dates mean midnight UTC)."""
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        value = datetime.fromisoformat(text) if "T" in text or " " in text else date.fromisoformat(text)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
    return datetime(value.year, value.month, value.day, tzinfo=UTC)


def iso(value: datetime) -> str:
    """The canonical text of a time: UTC, seconds precision unless finer is present, ``Z``."""
    text = value.astimezone(UTC).isoformat()
    return text.replace("+00:00", "Z")


def canonical_json(value: JsonValue) -> bytes:
    """Deterministic JSON bytes (sorted keys, no whitespace) for hashing and snapshots."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def derive_id(*parts: JsonValue, size: int = 16) -> str:
    """A deterministic hex id (``2*size`` characters) from JSON-serialisable parts."""
    return hashlib.blake2b(canonical_json(list(parts)), digest_size=size).hexdigest()


@dataclass(frozen=True, slots=True)
class Fact:
    """One operation on one entity of one user. Immutable; ``version`` is the record version.

    ``attributes`` must not be mutated after construction (it is shared, not copied).
    """

    fact_id: str
    user_id: str
    entity_type: str
    entity_id: str
    op: Op
    attributes: Mapping[str, JsonValue]
    valid_time: datetime
    observed_time: datetime
    confidence: float = 1.0
    provenance: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()
    source: str = "observation"
    version: int = FACT_VERSION

    @property
    def entity_key(self) -> tuple[str, str]:
        return (self.entity_type, self.entity_id)

    @property
    def order_key(self) -> tuple[datetime, datetime, str]:
        """The contradiction rule: later valid time wins, then later observed time, then id."""
        return (self.valid_time, self.observed_time, self.fact_id)


def fact_id_for(
    *,
    user_id: str,
    entity_type: str,
    entity_id: str,
    op: Op,
    attributes: Mapping[str, JsonValue],
    valid_time: datetime,
    observed_time: datetime,
    provenance: tuple[str, ...],
    supersedes: tuple[str, ...] = (),
    confidence: float = 1.0,
    source: str = "observation",
) -> str:
    """The fact id: a hash of every field (content, times, provenance).

    Two facts with the same id are the same fact, so keeping either is the
    same; re-extracting or re-ingesting the same source yields the same id.
    """
    return derive_id(
        user_id, entity_type, entity_id, op.value, dict(attributes), iso(valid_time),
        iso(observed_time), sorted(provenance), sorted(supersedes), confidence, source,
    )


def make_fact(
    *,
    user_id: str,
    entity_type: str,
    entity_id: str,
    op: Op = Op.ASSERT,
    attributes: Mapping[str, JsonValue] | None = None,
    valid_time: datetime | date | str,
    observed_time: datetime | date | str | None = None,
    confidence: float = 1.0,
    provenance: tuple[str, ...] = (),
    supersedes: tuple[str, ...] = (),
    source: str = "observation",
) -> Fact:
    """Build a fact with its derived id. ``observed_time`` defaults to ``valid_time``."""
    valid = to_utc(valid_time)
    observed = to_utc(observed_time) if observed_time is not None else valid
    attrs = dict(attributes or {})
    prov = tuple(provenance)
    sup = tuple(supersedes)
    fid = fact_id_for(
        user_id=user_id, entity_type=entity_type, entity_id=entity_id, op=op, attributes=attrs,
        valid_time=valid, observed_time=observed, provenance=prov, supersedes=sup,
        confidence=confidence, source=source,
    )
    return Fact(fid, user_id, entity_type, entity_id, op, attrs, valid, observed, confidence,
                prov, sup, source)


@dataclass(frozen=True, slots=True)
class Tick:
    """A clock tick: event time has reached ``time`` (drives time-based rules)."""

    time: datetime
    version: int = FACT_VERSION


@dataclass(frozen=True, slots=True)
class WindowMark:
    """Closes checkpoint window ``window_id``: every record before it belongs to a closed window.

    Written to the log before the window's outputs are committed, so a replay cuts
    the same windows and raises the same alerts at the same event times.
    """

    window_id: int
    version: int = FACT_VERSION
    reason: str = field(default="size", compare=False)


LogRecord: TypeAlias = Fact | Tick | WindowMark
