"""Avro values of the Kafka topics, in the Confluent wire format, encoded with fastavro.

A value is ``0x00`` (magic byte), the writer schema's id (4 bytes, big-endian), then the
schemaless Avro body. Keys are not Avro: plain UTF-8 strings, made by
:mod:`uac.streams.topics` (``user_id``; ``user_id/fact_id`` on ``uac.facts``;
``user_id/entity_type/entity_id`` on ``uac.state``, each part percent-encoded).
Times are ``timestamp-micros`` (UTC, exact to the microsecond); attribute maps are canonical
JSON text in ``*_json`` fields. Decoding reads with the writer's schema (from the registry)
into the newest local schema of the topic (Avro schema resolution).

Layers: pure record <-> datum mappers and framing functions, then :class:`AvroCodec`, which
looks ids up in a registry (the only I/O) and caches every parsed schema.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import fastavro
import orjson

from uac.checkpointer.fold import ChangeKind, EntityChange
from uac.checkpointer.records import RECORD_VERSION, EntityRow, StateChange
from uac.domains.facts import Fact, Op, Tick, WindowMark, canonical_json, iso, to_utc
from uac.errors import CodecError
from uac.executor.alerts import Alert, AlertEvent, AlertEventKind, AlertStatus, Evidence
from uac.executor.rules import Severity
from uac.extraction.turns import Turn
from uac.streams.compat import backward_problems
from uac.streams.registry import LocalSchemaRegistry, SchemaNotFoundError, SchemaRegistry
from uac.streams.rejects import Reject

MAGIC = 0
HEADER = struct.Struct(">BI")
TOPICS = ("uac.turns", "uac.observations", "uac.facts", "uac.state", "uac.state-changes", "uac.alerts",
          "uac.dlq")
SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"
"""The .avsc files, shipped inside the package (``schemas/`` at the top level links here)."""
"""The repository's ``schemas/`` (the newest version of each subject is the reader schema)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
T = TypeVar("T")


def subject_for(topic: str) -> str:
    """Confluent's TopicNameStrategy: the value subject of ``topic``."""
    return f"{topic}-value"


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

def frame(schema_id: int, body: bytes) -> bytes:
    """Confluent wire format: magic byte, 4-byte big-endian schema id, Avro body."""
    return HEADER.pack(MAGIC, schema_id) + body


def unframe(data: bytes) -> tuple[int, bytes]:
    """(schema id, body) of a framed value; :class:`CodecError` if it is not framed."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < HEADER.size:
        raise CodecError(f"not Confluent-framed Avro: {len(data)} byte(s), the header alone is "
                         f"{HEADER.size} (magic byte 0 and a 4-byte schema id)")
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CodecError(f"wrong magic byte 0x{magic:02x} (expected 0x00): not Confluent-framed Avro "
                         f"(starts with {data[:16]!r})")
    return schema_id, data[HEADER.size:]


def write_body(schema: Any, datum: Any) -> bytes:
    """The schemaless Avro body of ``datum`` (``schema`` parsed by :func:`fastavro.parse_schema`)."""
    out = io.BytesIO()
    try:
        fastavro.schemaless_writer(out, schema, datum, strict_allow_default=True)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, struct.error) as exc:
        raise CodecError(f"cannot encode: {type(exc).__name__}: {exc}") from None
    return out.getvalue()


def read_body(writer: Any, reader: Any, body: bytes) -> Any:
    """Decode a body written with ``writer`` into ``reader`` (parsed; None: the writer's own);
    every byte must be used."""
    buffer = io.BytesIO(body)
    try:
        datum = fastavro.schemaless_reader(buffer, writer, reader, return_record_name=True)
    except Exception as exc:  # fastavro raises many kinds on garbage (EOF, index, unicode, overflow)
        raise CodecError(f"Avro body does not parse ({len(body)} bytes): {type(exc).__name__}: "
                         f"{exc or 'truncated'}") from None
    left = len(body) - buffer.tell()
    if left:
        raise CodecError(f"Avro body has {left} trailing byte(s) after the record: wrong schema or "
                         "corrupt value")
    return datum


# -- pure: records <-> Avro datums ----------------------------------------------------------------

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


def entity_to_datum(row: EntityRow) -> dict[str, Any]:
    return {"version": RECORD_VERSION, "user_id": row.user_id, "entity_type": row.entity_type,
            "entity_id": row.entity_id, "attributes_json": _json_text(row.attributes, "attributes"),
            "state_version": row.state_version}


def entity_from_datum(d: dict[str, Any]) -> EntityRow:
    return EntityRow(d["user_id"], d["entity_type"], d["entity_id"], True,
                     _json_object(d["attributes_json"], "attributes_json"), d["state_version"])


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
    "uac.state": ((EntityRow,), entity_to_datum, entity_from_datum),
    "uac.state-changes": ((StateChange,), state_change_to_datum, state_change_from_datum),
    "uac.alerts": ((AlertEvent,), alert_event_to_datum, alert_event_from_datum),
    "uac.dlq": ((DeadLetter, Reject), dead_letter_to_datum, dead_letter_from_datum),
}
"""Per topic: the Python types it carries, record -> datum, datum -> record."""


def _mapper(topic: str) -> Mapper:
    mapper = MAPPERS.get(topic)
    if mapper is None:
        raise CodecError(f"no Avro mapping for topic {topic!r}; one of {list(MAPPERS)}")
    return mapper


# -- the codec: registry look-ups (I/O) around the pure functions ---------------------------------

class AvroCodec:
    """Encode and decode the values of uac's topics in the Confluent wire format.

    ``readers`` holds the local schemas (default: the repository's ``schemas/``); the newest
    version of a subject is the schema values are written with and read into. ``registry``
    gives ids (default: ``readers`` itself): with ``auto_register`` the writer schema is
    registered if new (as Confluent's serializers do), otherwise only looked up. Decoding
    fetches the writer schema by id, checks once per (id, subject) that the reader schema can
    read it, and resolves. Parsed schemas, ids and checks are cached. Bytes that cannot be
    decoded raise :class:`CodecError`; a registry that cannot be reached raises its own
    retriable :class:`~uac.streams.registry.SchemaRegistryError` (not poison: try again).
    """

    def __init__(self, registry: SchemaRegistry | None = None, readers: LocalSchemaRegistry | None = None,
                 *, auto_register: bool = True) -> None:
        self.readers = readers if readers is not None else LocalSchemaRegistry.from_dir(SCHEMAS_DIR)
        self.registry = registry if registry is not None else self.readers
        self.auto_register = auto_register
        self._writers: dict[str, tuple[int, Any]] = {}
        self._readers: dict[str, tuple[Any, Any]] = {}
        self._by_id: dict[int, tuple[Any, Any]] = {}
        self._plans: dict[tuple[int, str], tuple[list[str], Any]] = {}
        """(writer id, subject) -> (why the reader cannot read it, the reader schema or None)."""

    @staticmethod
    def _parse(text: str, what: str) -> tuple[Any, Any]:
        """(schema JSON, fastavro-parsed schema), each parse with its own named types."""
        try:
            raw = json.loads(text)
            return raw, fastavro.parse_schema(raw, named_schemas={})
        except Exception as exc:  # fastavro's SchemaParseException, UnknownType, ValueError...
            raise CodecError(f"{what} is not a valid Avro schema: {type(exc).__name__}: {exc}") from None

    def _reader(self, subject: str) -> tuple[Any, Any]:
        cached = self._readers.get(subject)
        if cached is None:
            try:
                entry = self.readers.latest(subject)
            except SchemaNotFoundError:
                raise CodecError(f"no local schema for subject {subject!r}") from None
            cached = self._readers.setdefault(subject, self._parse(entry.schema, f"local {subject}"))
        return cached

    def _writer(self, subject: str) -> tuple[int, Any]:
        cached = self._writers.get(subject)
        if cached is None:
            raw, parsed = self._reader(subject)
            text = json.dumps(raw)
            if self.auto_register:
                schema_id = self.registry.register(subject, text)
            else:
                schema_id = self.registry.lookup(subject, text).schema_id
            cached = self._writers.setdefault(subject, (schema_id, parsed))
        return cached

    def _writer_by_id(self, schema_id: int) -> tuple[Any, Any]:
        cached = self._by_id.get(schema_id)
        if cached is None:
            try:
                text = self.registry.get_schema(schema_id)
            except SchemaNotFoundError:
                raise CodecError(f"unknown schema id {schema_id}: the registry has no such schema") from None
            cached = self._by_id.setdefault(schema_id, self._parse(text, f"schema id {schema_id}"))
        return cached

    def encode(self, topic: str, record: object) -> bytes:
        """The framed Avro value of ``record`` on ``topic``."""
        types, to_datum, _ = _mapper(topic)
        if not isinstance(record, types):
            raise CodecError(f"{topic} carries {[t.__name__ for t in types]}, not {type(record).__name__}")
        schema_id, parsed = self._writer(subject_for(topic))
        return frame(schema_id, write_body(parsed, to_datum(record)))

    def decode(self, topic: str, data: bytes) -> Any:
        """The record a framed value of ``topic`` holds; :class:`CodecError` saying what is wrong."""
        _, _, from_datum = _mapper(topic)
        schema_id, body = unframe(data)
        subject = subject_for(topic)
        writer_raw, writer = self._writer_by_id(schema_id)
        reader_raw, reader = self._reader(subject)
        plan = self._plans.get((schema_id, subject))
        if plan is None:  # same schema: no resolution needed (twice as fast)
            plan = (backward_problems(reader_raw, writer_raw), None if reader_raw == writer_raw else reader)
            self._plans[(schema_id, subject)] = plan
        if plan[0]:
            raise CodecError(f"schema id {schema_id} cannot be read as {subject}: {'; '.join(plan[0][:3])}")
        datum = read_body(writer, plan[1], body)
        try:
            return from_datum(datum)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CodecError(f"{topic} value does not make a record: {type(exc).__name__}: {exc}") from None

    def decode_as(self, topic: str, data: bytes, kind: type[T]) -> T:
        """:meth:`decode`, checked to be a ``kind``."""
        record = self.decode(topic, data)
        if not isinstance(record, kind):
            raise CodecError(f"{topic} value is a {type(record).__name__}, not a {kind.__name__}")
        return record

    def encode_entity(self, row: EntityRow) -> bytes | None:
        """A ``uac.state`` value: the entity, or None (the tombstone) when it no longer exists."""
        return self.encode("uac.state", row) if row.exists else None

    def decode_entity(self, key: bytes | str, value: bytes | None) -> EntityRow:
        """A ``uac.state`` record; a tombstone gives ``exists=False`` (and ``state_version`` 0)."""
        if value is not None:
            return self.decode_as("uac.state", value, EntityRow)
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        parts = [unquote(p) for p in text.split("/")]  # the inverse of topics.state_key
        if len(parts) != 3 or not all(parts):
            raise CodecError(f"uac.state key {text!r} is not user_id/entity_type/entity_id")
        return EntityRow(parts[0], parts[1], parts[2], False, {}, 0)
