"""Structured observations (JSON Lines) to facts: parsing and validation. No I/O.

One observation per line::

    {"user": "alice", "type": "medication", "op": "assert",
     "attributes": {"name": "amoxicillin", "prescribed_on": "2025-03-02"},
     "valid_time": "2025-03-02", "observed_time": "2025-03-02T10:00:00Z",
     "source_id": "pharmacy-7781"}

Optional: ``id`` (entity id; otherwise derived from the type's natural key),
``confidence`` (0..1, default 1), ``supersedes`` (source ids or fact ids this
observation corrects). A line ``{"tick": "<time>"}`` advances event time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from uac.domains.catalog import GENERIC_TYPE, derive_entity_id, get_type, validate_attributes
from uac.domains.facts import Fact, Op, Tick, make_fact, to_utc
from uac.errors import ValidationError

REQUIRED = ("user", "type", "attributes", "valid_time", "source_id")
OPTIONAL = ("op", "id", "observed_time", "confidence", "supersedes")
MAX_LINE_BYTES = 1 << 20


def _text(data: Mapping[str, Any], name: str, where: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name!r} must be a non-empty string, got {value!r}", where=where)
    if len(value) > 512:
        raise ValidationError(f"{name!r} is longer than 512 characters", where=where)
    return value.strip()


def _time(data: Mapping[str, Any], name: str, where: str) -> Any:
    text = _text(data, name, where)
    try:
        return to_utc(text)
    except ValueError:
        raise ValidationError(f"{name!r} is not an ISO 8601 date or time: {text!r}",
                              where=where) from None


def parse_observation(data: Any, where: str) -> Fact | Tick:
    """Validate one decoded observation (or tick) and turn it into a fact."""
    if not isinstance(data, dict):
        raise ValidationError("an observation must be a JSON object", where=where)
    if set(data) == {"tick"}:
        return Tick(_time(data, "tick", where))
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ValidationError(f"unknown field(s) {unknown}; expected {list(REQUIRED + OPTIONAL)}",
                              where=where)
    missing = [name for name in REQUIRED if name not in data]
    if missing:
        raise ValidationError(f"missing field(s) {missing}", where=where)
    user, etype, source = (_text(data, n, where) for n in ("user", "type", "source_id"))
    try:
        op = Op(data.get("op", "assert"))
    except ValueError:
        raise ValidationError(f"'op' must be one of {[o.value for o in Op]}, got {data['op']!r}",
                              where=where) from None
    attrs = data["attributes"]
    if not isinstance(attrs, dict):
        raise ValidationError("'attributes' must be a JSON object", where=where)
    if get_type(etype) is None:  # no model for it: keep it, as a generic entity
        attrs = {"kind": etype, **attrs}
        etype = GENERIC_TYPE
    attrs = validate_attributes(etype, attrs, where=where)
    confidence = data.get("confidence", 1.0)
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not (
        0.0 <= confidence <= 1.0
    ):
        raise ValidationError(f"'confidence' must be a number in [0, 1], got {confidence!r}",
                              where=where)
    supersedes = data.get("supersedes", [])
    if not isinstance(supersedes, list) or not all(isinstance(s, str) and s for s in supersedes):
        raise ValidationError("'supersedes' must be a list of source or fact ids", where=where)
    if source in supersedes:
        raise ValidationError("an observation cannot supersede its own source id", where=where)
    entity_id = _text(data, "id", where) if "id" in data else derive_entity_id(etype, attrs, source)
    if op is Op.RETRACT and "id" not in data and not attrs:
        raise ValidationError("a retraction needs 'id' or the key attributes", where=where)
    return make_fact(
        user_id=user, entity_type=etype, entity_id=entity_id, op=op, attributes=attrs,
        valid_time=_time(data, "valid_time", where),
        observed_time=_time(data, "observed_time", where) if "observed_time" in data else None,
        confidence=float(confidence), provenance=(source,), supersedes=tuple(supersedes),
    )


def parse_line(line: bytes | str, where: str) -> Fact | Tick | None:
    """Parse one JSON Lines line (blank lines and ``#`` comments give None)."""
    data = decode_line(line, where)
    return None if data is None else parse_observation(data, where)


def decode_line(line: bytes | str, where: str) -> Any:
    """One JSON Lines line decoded (None for a blank line or a ``#`` comment)."""
    if len(line) > MAX_LINE_BYTES:
        raise ValidationError(f"line is longer than {MAX_LINE_BYTES} bytes", where=where)
    text = line.strip()
    if not text or text[:1] in ("#", b"#"):
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"not valid JSON ({exc})", where=where) from None
    return data
