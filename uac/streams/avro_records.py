"""Python records <-> Avro datums for every uac topic (pure: no I/O, no schemas).

Times become ``timestamp-micros`` integers (UTC, exact); attribute maps canonical JSON text;
keys are not part of a value (see :mod:`uac.streams.topics`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from uac.checkpointer.fold import ChangeKind, EntityChange
from uac.checkpointer.records import RECORD_VERSION, EntityRow, StateChange
from uac.domains.facts import Fact, Op, Tick, WindowMark, canonical_json, iso, to_utc
from uac.errors import CodecError, ValidationError
from uac.executor.alerts import Alert, AlertEvent, AlertEventKind, AlertStatus, Evidence
from uac.executor.rules import Severity
from uac.extraction.turns import Turn
from uac.streams.codec import fact_from_dict, fact_to_dict
from uac.streams.rejects import Reject

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A value of ``uac.dlq``: what could not be processed, why, by which step, from where."""

    step_id: str
    reason: str
    payload: bytes
    source: str = ""
    source_topic: str | None = None
    source_partition: int | None = None
    source_offset: int | None = None
    version: int = 1

    @classmethod
    def from_reject(cls, reject: Reject) -> DeadLetter:
        payload = reject.payload.encode("utf-8", "surrogateescape")
        return cls(reject.step_id, reject.reason, payload, reject.source)

    def to_reject(self) -> Reject:
        where = f"{self.source_topic}[{self.source_partition}]@{self.source_offset}"
        source = self.source or (where if self.source_topic else "")
        return Reject(self.step_id, source, self.reason, self.payload.decode("utf-8", "surrogateescape"))


# -- pure: framing and bodies ---------------------------------------------------------------------

def micros(value: datetime) -> int:
    """Microseconds since the epoch (exact; a naive time is UTC, as :func:`to_utc` reads it)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // _MICRO


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return _EPOCH + int(value) * _MICRO


def _json_text(value: Any, what: str) -> str:
    try:
        return canonical_json(dict(value)).decode()
    except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
        raise CodecError(f"{what} is not a JSON object: {exc}") from None


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CodecError(f"{what} is not a JSON object")
    return value


def _tick(tick: Tick) -> tuple[str, dict[str, Any]]:
    return ("uac.Tick", {"version": tick.version, "time": micros(tick.time)})


def turn_to_datum(turn: Turn) -> dict[str, Any]:
    return {"version": turn.version, "user_id": turn.user_id, "conversation_id": turn.conversation_id,
            "turn_id": turn.turn_id, "role": turn.role, "text": turn.text,
            "timestamp": micros(turn.timestamp), "session_id": turn.session_id}


def turn_from_datum(d: dict[str, Any]) -> Turn:
    return Turn(d["user_id"], d["conversation_id"], d["turn_id"], d["role"], d["text"],
                _time(d["timestamp"]), d["session_id"], d["version"])


def log_record_to_datum(record: Fact | Tick | WindowMark) -> tuple[str, dict[str, Any]]:
    """A ``uac.facts`` value: a union of Fact, Tick and WindowMark (fastavro's tuple notation)."""
    if isinstance(record, Tick):
        return _tick(record)
    if isinstance(record, WindowMark):
        return ("uac.WindowMark", {"version": record.version, "window_id": record.window_id,
                                   "reason": record.reason})
    return ("uac.Fact", {
        "version": record.version, "fact_id": record.fact_id, "user_id": record.user_id,
        "entity_type": record.entity_type, "entity_id": record.entity_id, "op": record.op.value,
        "attributes_json": _json_text(record.attributes, "attributes"),
        "valid_time": micros(record.valid_time), "observed_time": micros(record.observed_time),
        "confidence": record.confidence, "provenance": list(record.provenance),
        "supersedes": list(record.supersedes), "source": record.source})


def log_record_from_datum(value: tuple[str, dict[str, Any]]) -> Fact | Tick | WindowMark:
    name, d = value
    if name == "uac.Tick":
        return Tick(_time(d["time"]), d["version"])
    if name == "uac.WindowMark":
        return WindowMark(d["window_id"], d["version"], d["reason"])
    return Fact(d["fact_id"], d["user_id"], d["entity_type"], d["entity_id"], Op(d["op"]),
                _json_object(d["attributes_json"], "attributes_json"), _time(d["valid_time"]),
                _time(d["observed_time"]), d["confidence"], tuple(d["provenance"]),
                tuple(d["supersedes"]), d["source"], d["version"])


def observation_to_datum(data: Mapping[str, Any] | Tick) -> tuple[str, dict[str, Any]]:
    """A ``uac.observations`` value from an observation in its JSON format (or a tick)."""
    if isinstance(data, Tick):
        return _tick(data)
    try:
        if set(data) == {"tick"}:
            return _tick(Tick(to_utc(data["tick"])))
        observed = data.get("observed_time")
        return ("uac.Observation", {
            "version": 1, "user_id": data["user"], "entity_type": data["type"],
            "op": data.get("op", "assert"), "entity_id": data.get("id"),
            "attributes_json": _json_text(data["attributes"], "attributes"),
            "valid_time": micros(to_utc(data["valid_time"])),
            "observed_time": None if observed is None else micros(to_utc(observed)),
            "source_id": data["source_id"], "confidence": float(data.get("confidence", 1.0)),
            "supersedes": list(data.get("supersedes", []))})
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"cannot encode the observation: {type(exc).__name__}: {exc}") from None


def observation_from_datum(value: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """The observation as its JSON format object (what ``parse_observation`` validates)."""
    name, d = value
    if name == "uac.Tick":
        return {"tick": iso(_time(d["time"]))}
    out: dict[str, Any] = {
        "user": d["user_id"], "type": d["entity_type"], "op": d["op"],
        "attributes": _json_object(d["attributes_json"], "attributes_json"),
        "valid_time": iso(_time(d["valid_time"])), "source_id": d["source_id"],
        "confidence": d["confidence"], "supersedes": list(d["supersedes"])}
    if d["entity_id"] is not None:
        out["id"] = d["entity_id"]
    if d["observed_time"] is not None:
        out["observed_time"] = iso(_time(d["observed_time"]))
    return out


@dataclass(frozen=True, slots=True)
class EntityRecord:
    """A value of ``uac.state``: the entity's row and every fact about it (what a worker taking over
    the partition folds to rebuild the entity; empty when written by schema version 1)."""

    row: EntityRow
    facts: tuple[Fact, ...] = ()


def entity_to_datum(record: EntityRow | EntityRecord) -> dict[str, Any]:
    row, facts = (record, ()) if isinstance(record, EntityRow) else (record.row, record.facts)
    return {"version": RECORD_VERSION, "user_id": row.user_id, "entity_type": row.entity_type,
            "entity_id": row.entity_id, "attributes_json": _json_text(row.attributes, "attributes"),
            "state_version": row.state_version,
            "facts_json": orjson.dumps([fact_to_dict(f) for f in sorted(facts, key=_fact_id)]).decode()}


def _fact_id(fact: Fact) -> str:
    return fact.fact_id


def entity_from_datum(d: dict[str, Any]) -> EntityRecord:
    row = EntityRow(d["user_id"], d["entity_type"], d["entity_id"], True,
                    _json_object(d["attributes_json"], "attributes_json"), d["state_version"])
    try:
        items = orjson.loads(d.get("facts_json") or "[]")
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"facts_json is not JSON: {exc}") from None
    if not isinstance(items, list):
        raise CodecError("facts_json must be a JSON array")
    facts = []
    for item in items:
        if not isinstance(item, dict):
            raise CodecError("facts_json holds a non-object")
        try:
            fact = fact_from_dict(item)
        except ValidationError as exc:
            raise CodecError(f"facts_json holds an invalid fact: {exc}") from None
        if (fact.user_id, fact.entity_type, fact.entity_id) != (row.user_id, row.entity_type,
                                                                 row.entity_id):
            raise CodecError(f"facts_json holds fact {fact.fact_id} of another entity")
        facts.append(fact)
    return EntityRecord(row, tuple(facts))


def state_change_to_datum(change: StateChange) -> dict[str, Any]:
    return {"version": change.version, "user_id": change.user_id, "state_version": change.state_version,
            "window_id": change.window_id, "now": micros(change.now),
            "changes": [{"entity_type": c.entity_type, "entity_id": c.entity_id, "kind": c.kind.value}
                        for c in change.changes]}


def state_change_from_datum(d: dict[str, Any]) -> StateChange:
    return StateChange(d["user_id"], d["state_version"], d["window_id"], _time(d["now"]),
                       tuple(EntityChange(c["entity_type"], c["entity_id"], ChangeKind(c["kind"]))
                             for c in d["changes"]), d["version"])


def alert_event_to_datum(event: AlertEvent) -> dict[str, Any]:
    a = event.alert
    return {"version": 1, "kind": event.kind.value, "at": micros(event.at), "alert": {
        "version": a.version, "alert_id": a.alert_id, "user_id": a.user_id, "rule_id": a.rule_id,
        "subject": a.subject, "severity": a.severity.value, "message": a.message,
        "status": a.status.value, "raised_at": micros(a.raised_at),
        "resolved_at": None if a.resolved_at is None else micros(a.resolved_at),
        "details_json": _json_text(a.details, "details"),
        "evidence": {"entities": list(a.evidence.entities), "fact_ids": list(a.evidence.fact_ids),
                     "sources": list(a.evidence.sources)}}}


def alert_event_from_datum(d: dict[str, Any]) -> AlertEvent:
    a, ev = d["alert"], d["alert"]["evidence"]
    alert = Alert(a["alert_id"], a["user_id"], a["rule_id"], a["subject"], Severity(a["severity"]),
                  a["message"], AlertStatus(a["status"]), _time(a["raised_at"]),
                  Evidence(tuple(ev["entities"]), tuple(ev["fact_ids"]), tuple(ev["sources"])),
                  _json_object(a["details_json"], "details_json"),
                  None if a["resolved_at"] is None else _time(a["resolved_at"]), a["version"])
    return AlertEvent(AlertEventKind(d["kind"]), alert, _time(d["at"]))


def dead_letter_to_datum(letter: DeadLetter | Reject) -> dict[str, Any]:
    if isinstance(letter, Reject):
        letter = DeadLetter.from_reject(letter)
    return {"version": letter.version, "step_id": letter.step_id, "reason": letter.reason,
            "source": letter.source, "source_topic": letter.source_topic,
            "source_partition": letter.source_partition, "source_offset": letter.source_offset,
            "payload": bytes(letter.payload)}


def dead_letter_from_datum(d: dict[str, Any]) -> DeadLetter:
    return DeadLetter(d["step_id"], d["reason"], d["payload"], d["source"], d["source_topic"],
                      d["source_partition"], d["source_offset"], d["version"])


Mapper = tuple[tuple[type, ...], Callable[[Any], Any], Callable[[Any], Any]]
MAPPERS: dict[str, Mapper] = {
    "uac.turns": ((Turn,), turn_to_datum, turn_from_datum),
    "uac.observations": ((Mapping, Tick), observation_to_datum, observation_from_datum),
    "uac.facts": ((Fact, Tick, WindowMark), log_record_to_datum, log_record_from_datum),
    "uac.state": ((EntityRow, EntityRecord), entity_to_datum, entity_from_datum),
    "uac.state-changes": ((StateChange,), state_change_to_datum, state_change_from_datum),
    "uac.alerts": ((AlertEvent,), alert_event_to_datum, alert_event_from_datum),
    "uac.dlq": ((DeadLetter, Reject), dead_letter_to_datum, dead_letter_from_datum),
}
"""Per topic: the Python types it carries, record -> datum, datum -> record."""
