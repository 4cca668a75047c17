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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import fastavro

from uac.checkpointer.records import EntityRow
from uac.domains.facts import Fact
from uac.errors import CodecError
from uac.streams.avro_records import MAPPERS, DeadLetter, EntityRecord, Mapper, micros
from uac.streams.compat import backward_problems
from uac.streams.registry import LocalSchemaRegistry, SchemaNotFoundError, SchemaRegistry
from uac.streams.topics import TOPICS as TOPIC_SPECS

MAGIC = 0
HEADER = struct.Struct(">BI")
TOPICS = tuple(spec.name for spec in TOPIC_SPECS)
"""The topics with an Avro value (every uac topic)."""
SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"
"""The .avsc files, shipped in the package (``schemas/`` at the top level links here); the newest
version of each subject is the reader schema."""
T = TypeVar("T")


__all__ = ["MAPPERS", "SCHEMAS_DIR", "TOPICS", "AvroCodec", "DeadLetter", "EntityRecord", "frame", "micros",
           "read_body", "subject_for", "unframe", "write_body"]


def _mapper(topic: str) -> Mapper:
    mapper = MAPPERS.get(topic)
    if mapper is None:
        raise CodecError(f"no Avro mapping for topic {topic!r}; one of {list(MAPPERS)}")
    return mapper


def subject_for(topic: str) -> str:
    """Confluent's TopicNameStrategy: the value subject of ``topic``."""
    return f"{topic}-value"


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

    def encode_entity(self, row: EntityRow, facts: Sequence[Fact] = ()) -> bytes | None:
        """A ``uac.state`` value: the entity with ``facts`` (every fact about it), or None (the
        tombstone) when it no longer exists."""
        return self.encode("uac.state", EntityRecord(row, tuple(facts))) if row.exists else None

    def decode_entity(self, key: bytes | str, value: bytes | None) -> EntityRow:
        """A ``uac.state`` record; a tombstone gives ``exists=False`` (and ``state_version`` 0)."""
        return self.decode_state(key, value).row

    def decode_state(self, key: bytes | str, value: bytes | None) -> EntityRecord:
        """A ``uac.state`` record with the entity's facts; a tombstone gives ``exists=False``."""
        if value is not None:
            return self.decode_as("uac.state", value, EntityRecord)
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        parts = [unquote(p) for p in text.split("/")]  # the inverse of topics.state_key
        if len(parts) != 3 or not all(parts):
            raise CodecError(f"uac.state key {text!r} is not user_id/entity_type/entity_id")
        return EntityRecord(EntityRow(parts[0], parts[1], parts[2], False, {}, 0))
