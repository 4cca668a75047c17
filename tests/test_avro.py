"""Avro values of every topic: round trips, the wire format, poison bytes, schema evolution and
BACKWARD_TRANSITIVE compatibility, and the Confluent REST client against a fake registry."""

from __future__ import annotations

import io
import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uac.checkpointer.fold import ChangeKind, EntityChange
from uac.checkpointer.records import EntityRow, StateChange
from uac.domains.facts import Fact, Op, Tick, WindowMark
from uac.errors import CodecError
from uac.executor.alerts import Alert, AlertEvent, AlertEventKind, AlertStatus, Evidence
from uac.executor.rules import Severity
from uac.extraction.turns import Turn
from uac.streams.avro import (
    MAPPERS,
    SCHEMAS_DIR,
    TOPICS,
    AvroCodec,
    DeadLetter,
    EntityRecord,
    frame,
    micros,
    subject_for,
    unframe,
    write_body,
)
from uac.streams.avro_records import entity_to_datum
from uac.streams.compat import backward_problems, backward_transitive_problems, compatibility_problems
from uac.streams.observations import parse_observation
from uac.streams.registry import (
    HttpSchemaRegistry,
    LocalSchemaRegistry,
    SchemaNotFoundError,
    SchemaRegistryError,
    normalize_schema,
)
from uac.streams.rejects import Reject
from uac.streams.topics import state_key

# -- strategies -----------------------------------------------------------------------------------

text = st.text(max_size=40)
name = st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s)
offsets = st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)))
times = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                     timezones=st.one_of(st.just(UTC), offsets))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4), max_leaves=12)
json_objects = st.dictionaries(text, json_values, max_size=5)
strs = st.lists(text, max_size=4).map(tuple)
confidences = st.floats(0.0, 1.0)

facts = st.builds(Fact, name, name, name, name, st.sampled_from(Op), json_objects, times, times, confidences,
                  strs, strs, text, st.integers(0, 5))
turns = st.builds(Turn, name, name, name, st.sampled_from(["user", "assistant"]), text, times, text,
                  st.integers(0, 5))
ticks = st.builds(Tick, times, st.integers(0, 5))
marks = st.builds(WindowMark, st.integers(-(2**63), 2**63 - 1), st.integers(0, 5), text)
rows = st.builds(EntityRow, name, name, name, st.just(True), json_objects, st.integers(0, 2**63 - 1))
changes = st.builds(StateChange, name, st.integers(0, 2**40), st.integers(-1, 2**40), times,
                    st.lists(st.builds(EntityChange, name, name, st.sampled_from(ChangeKind)), max_size=4)
                    .map(tuple), st.integers(0, 5))
alerts = st.builds(Alert, name, name, name, text, st.sampled_from(Severity), text,
                   st.sampled_from(AlertStatus), times, st.builds(Evidence, strs, strs, strs), json_objects,
                   st.none() | times, st.integers(0, 5))
alert_events = st.builds(AlertEvent, st.sampled_from(AlertEventKind), alerts, times)
letters = st.builds(DeadLetter, name, text, st.binary(max_size=64), text, st.none() | name,
                    st.none() | st.integers(0, 2**31 - 1), st.none() | st.integers(0, 2**63 - 1),
                    st.integers(0, 5))


@pytest.fixture(scope="module")
def codec() -> AvroCodec:
    return AvroCodec()


def roundtrip(codec: AvroCodec, topic: str, record: Any) -> Any:
    return codec.decode(topic, codec.encode(topic, record))


# -- round trips ----------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(record=st.one_of(facts, ticks, marks))
def test_log_records_round_trip(codec: AvroCodec, record: Fact | Tick | WindowMark) -> None:
    back = roundtrip(codec, "uac.facts", record)
    assert back == record and type(back) is type(record)
    for field in ("valid_time", "observed_time", "time"):
        if hasattr(record, field):  # same instant, to the microsecond, in UTC
            assert getattr(back, field).tzinfo is UTC
            assert micros(getattr(back, field)) == micros(getattr(record, field))


@settings(max_examples=60, deadline=None)
@given(turn=turns)
def test_turns_round_trip(codec: AvroCodec, turn: Turn) -> None:
    back = roundtrip(codec, "uac.turns", turn)
    assert back == turn and back.timestamp.tzinfo is UTC


@settings(max_examples=40, deadline=None)
@given(row=rows, change=changes, event=alert_events, letter=letters)
def test_state_alert_and_dlq_records_round_trip(codec: AvroCodec, row: EntityRow, change: StateChange,
                                                 event: AlertEvent, letter: DeadLetter) -> None:
    assert roundtrip(codec, "uac.state", row) == EntityRecord(row)
    assert roundtrip(codec, "uac.state-changes", change) == change
    assert roundtrip(codec, "uac.alerts", event) == event
    assert roundtrip(codec, "uac.dlq", letter) == letter


def test_state_tombstones_and_keys(codec: AvroCodec) -> None:
    gone = EntityRow("maya", "medication", "a/b", False, {}, 7)
    assert codec.encode_entity(gone) is None
    key = state_key("maya", "medication", "a/b")
    back = codec.decode_entity(key, None)
    assert (back.user_id, back.entity_type, back.entity_id) == ("maya", "medication", "a/b")
    assert not back.exists
    live = EntityRow("maya", "medication", "m1", True, {"name": "amoxicillin"}, 3)
    value = codec.encode_entity(live)
    assert value is not None and codec.decode_entity(key, value) == live
    with pytest.raises(CodecError, match="not user_id/entity_type/entity_id"):
        codec.decode_entity(b"maya", None)


@settings(max_examples=40, deadline=None)
@given(row=rows, about=st.lists(facts, max_size=4, unique_by=lambda f: f.fact_id))
def test_state_records_carry_the_entitys_facts(codec: AvroCodec, row: EntityRow, about: list[Fact]) -> None:
    """Schema v2: a ``uac.state`` value holds every fact about the entity (what a takeover folds)."""
    own = [replace(f, user_id=row.user_id, entity_type=row.entity_type, entity_id=row.entity_id)
           for f in about]
    value = codec.encode_entity(row, own)
    assert value is not None
    back = codec.decode_state(state_key(row.user_id, row.entity_type, row.entity_id), value)
    assert back.row == row and back.facts == tuple(sorted(own, key=lambda f: f.fact_id))


def test_state_v1_records_read_with_no_facts_and_foreign_facts_are_refused(codec: AvroCodec) -> None:
    row = EntityRow("maya", "allergy", "penicillin", True, {"substance": "penicillin"}, 2)
    v1 = codec.readers.get_version("uac.state-value", 1)
    datum = {k: v for k, v in entity_to_datum(row).items() if k != "facts_json"}
    old = frame(v1.schema_id, write_body(fastavro.parse_schema(json.loads(v1.schema)), datum))
    assert codec.decode_state(b"maya/allergy/penicillin", old) == EntityRecord(row, ())
    other = Fact("f1", "maya", "allergy", "latex", Op.ASSERT, {}, datetime(2024, 1, 1, tzinfo=UTC),
                 datetime(2024, 1, 1, tzinfo=UTC))
    bad = codec.encode("uac.state", EntityRecord(row, (other,)))
    with pytest.raises(CodecError, match="fact f1 of another entity"):
        codec.decode_state(b"maya/allergy/penicillin", bad)


@settings(max_examples=40, deadline=None)
@given(payload=text, step=name, reason=text, source=text)
def test_rejects_become_dead_letters(codec: AvroCodec, payload: str, step: str, reason: str,
                                     source: str) -> None:
    reject = Reject(step, source or "file.jsonl:3", reason, payload)
    letter = codec.decode_as("uac.dlq", codec.encode("uac.dlq", reject), DeadLetter)
    assert letter.payload == payload.encode() and letter.to_reject() == reject


def test_observations_round_trip_to_the_same_fact(codec: AvroCodec) -> None:
    obs = {"user": "alice", "type": "medication", "op": "assert",
           "attributes": {"name": "amoxicillin", "prescribed_on": "2025-03-02"},
           "valid_time": "2025-03-02", "observed_time": "2025-03-02T10:00:00.000123Z",
           "source_id": "pharmacy-7781", "confidence": 0.9, "supersedes": ["old-1"]}
    back = roundtrip(codec, "uac.observations", obs)
    assert parse_observation(back, "t") == parse_observation(obs, "t")
    minimal = {"user": "bob", "type": "allergy", "id": "a1", "op": "retract", "attributes": {},
               "valid_time": "2025-01-01T00:00:00Z", "source_id": "s"}
    back = roundtrip(codec, "uac.observations", minimal)
    assert parse_observation(back, "t") == parse_observation(minimal, "t")
    tick = roundtrip(codec, "uac.observations", {"tick": "2025-05-01T12:00:00.000001Z"})
    assert parse_observation(tick, "t") == Tick(datetime(2025, 5, 1, 12, 0, 0, 1, tzinfo=UTC))
    with pytest.raises(CodecError, match="cannot encode the observation"):
        codec.encode("uac.observations", {"user": "x"})


def test_encode_refuses_the_wrong_record_type(codec: AvroCodec) -> None:
    with pytest.raises(CodecError, match=r"uac.turns carries \['Turn'\], not Tick"):
        codec.encode("uac.turns", Tick(datetime(2025, 1, 1, tzinfo=UTC)))
    with pytest.raises(CodecError, match="no Avro mapping for topic"):
        codec.encode("uac.nope", Tick(datetime(2025, 1, 1, tzinfo=UTC)))
    bad = Fact("f", "u", "t", "e", Op.ASSERT, {"x": 2**70}, datetime(2025, 1, 1, tzinfo=UTC),
               datetime(2025, 1, 1, tzinfo=UTC))
    with pytest.raises(CodecError, match="attributes is not a JSON object"):
        codec.encode("uac.facts", bad)


# -- the wire format ------------------------------------------------------------------------------

def test_confluent_wire_format(codec: AvroCodec) -> None:
    turn = Turn("maya", "c", "t1", "user", "hi", datetime(2025, 1, 15, 9, 30, tzinfo=UTC))
    data = codec.encode("uac.turns", turn)
    schema_id = codec.readers.latest("uac.turns-value").schema_id
    assert data[0] == 0 and data[1:5] == schema_id.to_bytes(4, "big")
    assert unframe(data) == (schema_id, data[5:])
    schema = fastavro.parse_schema(json.loads(codec.readers.latest("uac.turns-value").schema))
    body = fastavro.schemaless_reader(io.BytesIO(data[5:]), schema)
    assert body["user_id"] == "maya" and body["timestamp"] == turn.timestamp and body["version"] == 1
    assert frame(258, b"xy") == b"\x00\x00\x00\x01\x02xy"


# -- poison ---------------------------------------------------------------------------------------

def good_fact_bytes(codec: AvroCodec) -> bytes:
    when = datetime(2025, 1, 1, tzinfo=UTC)
    return codec.encode("uac.facts", Fact("f1", "u", "allergy", "a1", Op.ASSERT, {"x": "yz"}, when, when))


@pytest.mark.parametrize(("make", "reason"), [
    (lambda good: b'{"kind": "fact"}', r"wrong magic byte 0x7b \(expected 0x00\)"),
    (lambda good: b"", r"not Confluent-framed Avro: 0 byte\(s\)"),
    (lambda good: b"\x00\x00\x01", r"not Confluent-framed Avro: 3 byte\(s\)"),
    (lambda good: b"\x01" + good[1:], "wrong magic byte 0x01"),
    (lambda good: frame(999_999, good[5:]), "unknown schema id 999999"),
    (lambda good: good[:-4], "Avro body does not parse"),
    (lambda good: good[:5], "Avro body does not parse"),
    (lambda good: good[:5] + b"\x08" + good[6:], "Avro body does not parse"),  # union index 4 of 3
    (lambda good: good + b"\x00\x01", "2 trailing byte"),
])
def test_poison_bytes_raise_codec_errors(codec: AvroCodec, make: Any, reason: str) -> None:
    with pytest.raises(CodecError, match=reason) as info:
        codec.decode("uac.facts", make(good_fact_bytes(codec)))
    assert info.value.reason and not info.value.retriable


def test_a_value_of_another_topic_is_refused(codec: AvroCodec) -> None:
    with pytest.raises(CodecError, match=r"cannot be read as uac.turns-value"):
        codec.decode("uac.turns", good_fact_bytes(codec))
    with pytest.raises(CodecError, match="not a Turn"):
        codec.decode_as("uac.facts", good_fact_bytes(codec), Turn)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=80))
def test_random_bodies_raise_only_codec_errors(codec: AvroCodec, body: bytes) -> None:
    schema_id = codec.readers.latest("uac.facts-value").schema_id
    try:
        codec.decode("uac.facts", frame(schema_id, body))
    except CodecError as exc:
        assert exc.reason


# -- schema evolution -----------------------------------------------------------------------------

def turns_v1() -> dict[str, Any]:
    return json.loads((SCHEMAS_DIR / "uac.turns-value.v1.avsc").read_text())


def with_field(schema: dict[str, Any], field: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "fields": [*schema["fields"], field]}


@pytest.fixture
def evolved(tmp_path: Path) -> Path:
    """A copy of schemas/ with a v2 of the turns subject (a field added with a default)."""
    shutil.copytree(SCHEMAS_DIR, tmp_path / "schemas")
    v2 = with_field(turns_v1(), {"name": "language", "type": "string", "default": "und",
                                 "doc": "The language of the text (BCP 47), und: unknown."})
    (tmp_path / "schemas" / "uac.turns-value.v2.avsc").write_text(json.dumps(v2, indent=2))
    return tmp_path / "schemas"


def test_old_bytes_decode_with_a_newer_reader(evolved: Path) -> None:
    shared = LocalSchemaRegistry.from_dir(evolved)
    old = AvroCodec(shared, LocalSchemaRegistry.from_dir(SCHEMAS_DIR))
    new = AvroCodec(shared, LocalSchemaRegistry.from_dir(evolved))
    when = datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    turn = Turn("maya", "c", "t1", "user", "Ich bin allergisch.", when)
    old_bytes = old.encode("uac.turns", turn)
    new_bytes = new.encode("uac.turns", turn)
    assert unframe(old_bytes)[0] == shared.get_version("uac.turns-value", 1).schema_id
    assert unframe(new_bytes)[0] == shared.get_version("uac.turns-value", 2).schema_id
    assert new.decode("uac.turns", old_bytes) == turn == new.decode("uac.turns", new_bytes)
    versions = [shared.get_version("uac.turns-value", v).parsed for v in shared.versions("uac.turns-value")]
    assert backward_transitive_problems(versions) == []
    assert shared.get_schema(7001) == shared.get_version("uac.turns-value", 1).schema


def test_a_field_added_without_default_is_incompatible(evolved: Path) -> None:
    bad = with_field(turns_v1(), {"name": "language", "type": "string", "doc": "no default"})
    problems = backward_problems(bad, turns_v1())
    assert problems == ["Turn.language: field added without a default (data written with the old schema "
                        "has no value for it)"]
    registry = LocalSchemaRegistry.from_dir(evolved)
    with pytest.raises(SchemaRegistryError, match="language: field added without a default") as info:
        registry.register("uac.turns-value", json.dumps(bad))
    assert info.value.status == 409
    (evolved / "uac.turns-value.v3.avsc").write_text(json.dumps(bad))
    broken = AvroCodec(LocalSchemaRegistry.from_dir(evolved), LocalSchemaRegistry.from_dir(evolved))
    old = AvroCodec(broken.registry, LocalSchemaRegistry.from_dir(SCHEMAS_DIR))
    data = old.encode("uac.turns", Turn("u", "c", "t", "user", "x", datetime(2025, 1, 1, tzinfo=UTC)))
    with pytest.raises(CodecError, match=r"cannot be read as uac\.turns-value: Turn\.language"):
        broken.decode("uac.turns", data)


def test_repository_schemas_are_backward_transitive() -> None:
    registry = LocalSchemaRegistry.from_dir(SCHEMAS_DIR)
    assert registry.subjects() == sorted(subject_for(t) for t in TOPICS)
    assert set(MAPPERS) == set(TOPICS)
    for subject in registry.subjects():
        versions = [registry.get_version(subject, v).parsed for v in registry.versions(subject)]
        for k in range(1, len(versions) + 1):  # every version reads every earlier one
            assert backward_transitive_problems(versions[:k]) == [], subject
        for record in _records(versions[-1]):
            assert record["namespace"] == "uac", record["name"]
            assert record.get("doc"), record["name"]
            assert all(f.get("doc") for f in record["fields"]), record["name"]
        for top in versions[-1] if isinstance(versions[-1], list) else [versions[-1]]:
            version = next(f for f in top["fields"] if f["name"] == "version")
            assert version["type"] == "int" and version["default"] == 1, top["name"]
        for entry in (registry.get_version(subject, v) for v in registry.versions(subject)):
            assert entry.schema_id == 1000 * (registry.subjects().index(subject) + 1) + entry.version


def _records(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, list):
        for branch in node:
            yield from _records(branch)
    elif isinstance(node, dict):
        if node.get("type") == "record":
            yield node
            for f in node["fields"]:
                yield from _records(f["type"])
        elif node.get("type") == "array":
            yield from _records(node["items"])
        elif node.get("type") == "map":
            yield from _records(node["values"])


def test_local_registry_refuses_gaps_and_keeps_ids_stable(tmp_path: Path) -> None:
    shutil.copytree(SCHEMAS_DIR, tmp_path / "s")
    before = LocalSchemaRegistry.from_dir(tmp_path / "s")
    alerts_v1 = json.loads((SCHEMAS_DIR / "uac.alerts-value.v1.avsc").read_text())
    alerts_v2 = with_field(alerts_v1, {"name": "note", "type": "string", "default": "", "doc": "A note."})
    (tmp_path / "s" / "uac.alerts-value.v2.avsc").write_text(json.dumps(alerts_v2))
    after = LocalSchemaRegistry.from_dir(tmp_path / "s")
    for subject in before.subjects():  # a new version changes no existing id
        for version in before.versions(subject):
            assert before.get_version(subject, version).schema_id == \
                after.get_version(subject, version).schema_id
    assert after.latest("uac.alerts-value").schema_id == 1002
    (tmp_path / "s" / "uac.dlq-value.v3.avsc").write_text((SCHEMAS_DIR / "uac.dlq-value.v1.avsc").read_text())
    with pytest.raises(SchemaRegistryError, match=r"versions \[1, 3\]"):
        LocalSchemaRegistry.from_dir(tmp_path / "s")
    (tmp_path / "s" / "uac.dlq-value.v2.avsc").write_text('{"type": "record"}')
    with pytest.raises(SchemaRegistryError, match=r"uac\.dlq-value version 2: not a valid Avro schema"):
        LocalSchemaRegistry.from_dir(tmp_path / "s")


# -- the compatibility checker --------------------------------------------------------------------

def rec(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "uac", "fields": list(fields), **extra}


def fld(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


@pytest.mark.parametrize(("old", "new", "reason"), [
    ("int", "long", None), ("int", "double", None), ("long", "float", None), ("float", "double", None),
    ("string", "bytes", None), ("bytes", "string", None), ("long", "int", "type changed from long to int"),
    ("double", "float", "type changed"), ("string", "int", "type changed"),
    ({"type": "long", "logicalType": "timestamp-millis"}, {"type": "long", "logicalType": "timestamp-micros"},
     "logical type changed"),
    ({"type": "enum", "name": "E", "symbols": ["a"]}, {"type": "enum", "name": "E", "symbols": ["a", "b"]},
     None),
    ({"type": "enum", "name": "E", "symbols": ["a", "b"]}, {"type": "enum", "name": "E", "symbols": ["a"]},
     r"lost symbol\(s\) \['b'\]"),
    ({"type": "enum", "name": "E", "symbols": ["a", "b"]},
     {"type": "enum", "name": "E", "symbols": ["a"], "default": "a"}, None),
    ({"type": "enum", "name": "E", "symbols": ["a"]}, {"type": "enum", "name": "F", "symbols": ["a"]},
     "name changed"),
    ("string", ["null", "string"], None), (["null", "string"], ["null", "string", "int"], None),
    (["null", "string"], "string", r"\[branch 0\]: type changed from null to string"),
    (["null", "int"], ["null", "long"], None), ("int", ["null", "string"], "no branch of the reader's union"),
    ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, None),
    ({"type": "map", "values": "long"}, {"type": "map", "values": "int"}, r"R\.x\{\}: type changed"),
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, "size changed"),
    (rec(fld("a", "int"), name="In"), rec(fld("a", "long"), fld("b", "string", default=""), name="In"), None),
    (rec(fld("a", "int"), name="In"), rec(fld("b", "string"), name="In"), r"R\.x\.b: field added without"),
    (rec(fld("a", "int"), name="In"), rec(fld("a", "int"), name="Out"), "record name changed"),
    (rec(fld("a", "int"), name="In"), rec(fld("a", "int"), name="Out", aliases=["uac.In"]), None),
    (rec(fld("a", "int"), name="In"), rec(fld("z", "int", aliases=["a"]), name="In"), None),
    (rec(fld("a", "int"), fld("gone", "string"), name="In"), rec(fld("a", "int"), name="In"), None),
])
def test_backward_rules(old: Any, new: Any, reason: str | None) -> None:
    problems = backward_problems(rec(fld("x", new)), rec(fld("x", old)))
    if reason is None:
        assert problems == []
    else:
        assert len(problems) == 1 and re.search(reason, problems[0]), problems


def test_defaults_must_fit_the_first_union_branch() -> None:
    old = rec(fld("a", "int"))
    assert backward_problems(rec(fld("a", "int"), fld("b", ["null", "string"], default=None)), old) == []
    assert backward_problems(rec(fld("a", "int"), fld("b", ["null", "string"], default="x")), old) == [
        "R.b: default 'x' does not fit the field's type"]
    ints = {"type": "array", "items": "int"}
    assert backward_problems(rec(fld("a", "int"), fld("b", ints, default=[1])), old) == []


def test_recursive_and_named_references_terminate() -> None:
    node = rec(fld("value", "int"), fld("next", ["null", "uac.Node"], default=None), name="Node")
    wider = rec(fld("value", "long"), fld("next", ["null", "Node"], default=None),
                fld("tag", "string", default=""), name="Node")
    assert backward_problems(wider, node) == []
    assert backward_problems(node, wider) == ["Node.value: type changed from long to int"]


def test_transitive_checks_every_earlier_version() -> None:
    v1 = rec(fld("a", "int"))
    v2 = rec(fld("a", "int"), fld("b", "string", default=""))
    v3 = rec(fld("a", "int"), fld("b", "string"))  # fine after v2, not after v1
    assert backward_problems(v3, v2) == []
    assert backward_transitive_problems([v1, v2, v3]) == [
        "version 1 -> new (backward): R.b: field added without a default (data written with the old "
        "schema has no value for it)"]
    assert compatibility_problems(v3, [v1, v2], "BACKWARD") == []
    assert compatibility_problems(v1, [v2], "FORWARD") == []
    assert compatibility_problems(v3, [v1], "NONE") == []
    assert backward_problems("not-a-type", "int")[0].startswith("not a valid Avro schema")


# -- the Confluent REST client against a fake registry --------------------------------------------

class FakeRegistry:
    """The Confluent Schema Registry endpoints uac uses, in memory (ids are global per schema)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.subjects: dict[str, list[str]] = {}
        self.config: dict[str, str] = {}
        self.requests: list[str] = []
        self.fail_next = 0
        self.delay = 0.0
        self.auth: str | None = None

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        parts = [unquote(p) for p in urlsplit(path).path.strip("/").split("/")]
        verbose = "verbose=true" in path
        if parts[:2] == ["schemas", "ids"] and method == "GET":
            by_id = {i: s for s, i in self.ids.items()}
            found = by_id.get(int(parts[2]))
            if found is None:
                return 404, {"error_code": 40403, "message": "Schema not found"}
            return 200, {"schema": found}
        if parts == ["subjects"]:
            return 200, sorted(self.subjects)
        if parts[0] == "config" and method == "PUT":
            self.config[parts[1]] = body["compatibility"]
            return 200, {"compatibility": body["compatibility"]}
        if parts[0] == "compatibility":
            subject, target = parts[2], parts[4] if len(parts) > 4 else "all"
            if subject not in self.subjects:
                return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
            olds = [json.loads(s) for s in self.subjects[subject]]
            level = self.config.get(subject, "BACKWARD")
            against = olds if target == "all" else olds[-1:]
            problems = compatibility_problems(json.loads(body["schema"]), against, level)
            return 200, {"is_compatible": not problems, **({"messages": problems} if verbose else {})}
        subject = parts[1]
        versions = self.subjects.get(subject)
        if len(parts) == 3 and method == "POST":  # register
            text = normalize_schema(body["schema"])
            if text not in (versions or []):
                problems = compatibility_problems(json.loads(text), [json.loads(s) for s in versions or []],
                                                  self.config.get(subject, "BACKWARD"))
                if problems:
                    return 409, {"error_code": 409, "message": "; ".join(problems)}
                self.subjects.setdefault(subject, []).append(text)
            return 200, {"id": self.ids.setdefault(text, len(self.ids) + 1)}
        if versions is None:
            return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
        if len(parts) == 2 and method == "POST":  # look up
            text = normalize_schema(body["schema"])
            if text not in versions:
                return 404, {"error_code": 40403, "message": "Schema not found"}
            return 200, self.entry(subject, versions.index(text) + 1)
        if len(parts) == 3:
            return 200, list(range(1, len(versions) + 1))
        number = len(versions) if parts[3] == "latest" else int(parts[3])
        if not 1 <= number <= len(versions):
            return 404, {"error_code": 40402, "message": "Version not found."}
        return 200, self.entry(subject, number)

    def entry(self, subject: str, version: int) -> dict[str, Any]:
        text = self.subjects[subject][version - 1]
        return {"subject": subject, "version": version, "id": self.ids[text], "schema": text}


@pytest.fixture
def fake() -> Iterator[tuple[FakeRegistry, str]]:
    state = FakeRegistry()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            state.requests.append(f"{self.command} {self.path}")
            state.auth = self.headers.get("Authorization")
            time.sleep(state.delay)
            if state.fail_next:
                state.fail_next -= 1
                status, answer = 500, {"error_code": 50001, "message": "store error"}
            else:
                status, answer = state.handle(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_http_registry_endpoints(fake: tuple[FakeRegistry, str]) -> None:
    state, url = fake
    registry = HttpSchemaRegistry(url, timeout=5, auth=("user", "secret"))
    v1 = json.dumps(turns_v1())
    v2 = json.dumps(with_field(turns_v1(), {"name": "lang", "type": "string", "default": ""}))
    bad = json.dumps(with_field(turns_v1(), {"name": "lang", "type": "string"}))
    subject = "uac.turns-value"
    assert registry.check_compatibility(subject, v1) == []  # no subject yet
    registry.set_compatibility(subject, "BACKWARD_TRANSITIVE")
    assert state.config[subject] == "BACKWARD_TRANSITIVE" and state.auth and state.auth.startswith("Basic ")
    first = registry.register(subject, v1)
    assert registry.register(subject, v1) == first  # cached: no second request
    assert sum(r.startswith("POST /subjects/") for r in state.requests) == 1
    assert registry.check_compatibility(subject, v2) == []
    assert "lang: field added without a default" in registry.check_compatibility(subject, bad)[0]
    assert any("/versions/latest?verbose=true" in r for r in state.requests)
    second = registry.register(subject, v2)
    assert registry.latest(subject).version == 2 and registry.latest(subject).schema_id == second
    assert registry.versions(subject) == [1, 2] and registry.subjects() == [subject]
    assert registry.get_version(subject, 1).schema_id == first
    assert registry.lookup(subject, v1).version == 1
    assert json.loads(registry.get_schema(second)) == json.loads(v2)
    assert registry.check_compatibility(subject, bad, version="all")
    with pytest.raises(SchemaRegistryError, match="HTTP 409") as info:
        registry.register(subject, bad)
    assert not info.value.retriable and info.value.status == 409
    with pytest.raises(SchemaNotFoundError, match="40403"):
        registry.get_schema(404)
    with pytest.raises(SchemaNotFoundError, match="40401"):
        registry.latest("uac.nope-value")


def test_http_registry_caches_schemas_and_retriable_errors(fake: tuple[FakeRegistry, str]) -> None:
    state, url = fake
    registry = HttpSchemaRegistry(url, timeout=0.3)
    schema_id = HttpSchemaRegistry(url).register("uac.turns-value", json.dumps(turns_v1()))
    registry.get_schema(schema_id)
    state.fail_next = 1
    registry.get_schema(schema_id)  # cached: the failing server is not asked
    with pytest.raises(SchemaRegistryError, match="HTTP 500 \\(50001\\): store error") as info:
        registry.latest("uac.turns-value")
    assert info.value.retriable and info.value.status == 500
    state.delay = 1.0
    with pytest.raises(SchemaRegistryError, match="unreachable") as timed_out:
        registry.versions("uac.turns-value")
    assert timed_out.value.retriable
    state.delay = 0.0
    closed = HttpSchemaRegistry("http://127.0.0.1:9", timeout=1)
    with pytest.raises(SchemaRegistryError, match="unreachable") as refused:
        closed.subjects()
    assert refused.value.retriable


def test_codec_over_the_http_registry(fake: tuple[FakeRegistry, str]) -> None:
    state, url = fake
    producer = AvroCodec(HttpSchemaRegistry(url))
    consumer = AvroCodec(HttpSchemaRegistry(url), auto_register=False)
    when = datetime(2025, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC)
    records = {"uac.facts": Fact("f", "u", "t", "e", Op.RETRACT, {}, when, when),
               "uac.alerts": AlertEvent(AlertEventKind.RAISED, Alert(
                   "a", "u", "r", "s", Severity.CRITICAL, "m", AlertStatus.OPEN, when,
                   Evidence(("t/e",))), when)}
    for topic, record in records.items():
        data = producer.encode(topic, record)
        assert consumer.decode(topic, data) == record
        assert consumer.encode(topic, record) == data  # looked up, not registered again
    assert sorted(state.subjects) == ["uac.alerts-value", "uac.facts-value"]
    with pytest.raises(CodecError, match="unknown schema id 77"):
        consumer.decode("uac.facts", frame(77, b""))
    state.fail_next = 5
    with pytest.raises(SchemaRegistryError) as info:  # a registry outage is retriable, not poison
        fresh = AvroCodec(HttpSchemaRegistry(url))
        fresh.decode("uac.facts", producer.encode("uac.facts", records["uac.facts"]))
    assert info.value.retriable and not isinstance(info.value, CodecError)
