"""Codecs for log records, alerts and state changes. No I/O; every byte decoded is untrusted."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from uac.checkpointer.fold import ChangeKind, EntityChange
from uac.checkpointer.records import StateChange
from uac.domains.facts import Fact, LogRecord, Op, Tick, WindowMark, iso, to_utc
from uac.errors import ValidationError
from uac.executor.alerts import Alert, AlertEvent, AlertEventKind, AlertStatus, Evidence
from uac.executor.rules import Severity


def encode_record(record: LogRecord) -> bytes:
    """One log line (JSON, no trailing newline)."""
    if isinstance(record, Fact):
        return orjson.dumps(fact_to_dict(record))
    if isinstance(record, Tick):
        return orjson.dumps({"kind": "tick", "time": iso(record.time), "version": record.version})
    return orjson.dumps({"kind": "window", "window_id": record.window_id,
                         "reason": record.reason, "version": record.version})


def fact_to_dict(fact: Fact) -> dict[str, Any]:
    return {
        "kind": "fact",
        "fact_id": fact.fact_id,
        "version": fact.version,
        "user_id": fact.user_id,
        "entity_type": fact.entity_type,
        "entity_id": fact.entity_id,
        "op": fact.op.value,
        "attributes": fact.attributes,
        "valid_time": iso(fact.valid_time),
        "observed_time": iso(fact.observed_time),
        "confidence": fact.confidence,
        "provenance": list(fact.provenance),
        "supersedes": list(fact.supersedes),
        "source": fact.source,
    }


def _str(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if value.__class__ is not str or not value:
        raise ValidationError(f"{name!r} must be a non-empty string, got {value!r}")
    return value


def _strs(data: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = data.get(name, ())
    if not value:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"{name!r} must be a list of strings")
    return tuple(value)


def _time(data: Mapping[str, Any], name: str) -> datetime:
    value = data.get(name)
    if not isinstance(value, str):
        raise ValidationError(f"{name!r} must be an ISO 8601 time, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(f"{name!r} is not an ISO 8601 time: {value!r}") from None
    if parsed.tzinfo is UTC:
        return parsed
    return to_utc(parsed)


def fact_from_dict(data: Mapping[str, Any]) -> Fact:
    """Rebuild a fact from its dict form, checking every field's type."""
    attrs = data.get("attributes")
    if not isinstance(attrs, dict):
        raise ValidationError("'attributes' must be an object")
    confidence = data.get("confidence", 1.0)
    if not isinstance(confidence, int | float) or isinstance(confidence, bool):
        raise ValidationError("'confidence' must be a number")
    op = _OPS.get(data.get("op"))  # type: ignore[arg-type]
    if op is None:
        raise ValidationError(f"'op' must be one of {sorted(_OPS)}, got {data.get('op')!r}")
    version = data.get("version", 1)
    if not isinstance(version, int):
        raise ValidationError("'version' must be an integer")
    source = data.get("source", "observation")
    return Fact(
        _str(data, "fact_id"), _str(data, "user_id"), _str(data, "entity_type"),
        _str(data, "entity_id"), op, attrs, _time(data, "valid_time"),
        _time(data, "observed_time"), float(confidence), _strs(data, "provenance"),
        _strs(data, "supersedes"), source if isinstance(source, str) else "observation", version,
    )


_OPS = {op.value: op for op in Op}


def decode_record(line: bytes | str) -> LogRecord:
    """Parse one log line; raises :class:`ValidationError` saying what is wrong."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValidationError("a record must be a JSON object")
    kind = data.get("kind")
    if kind == "fact":
        return fact_from_dict(data)
    if kind == "tick":
        try:
            return Tick(to_utc(_str(data, "time")))
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
    if kind == "window":
        wid = data.get("window_id")
        if not isinstance(wid, int) or isinstance(wid, bool):
            raise ValidationError("'window_id' must be an integer")
        return WindowMark(wid, reason=str(data.get("reason", "size")))
    raise ValidationError(f"unknown record kind {kind!r}")


def alert_to_dict(alert: Alert) -> dict[str, Any]:
    return {
        "alert_id": alert.alert_id,
        "version": alert.version,
        "user_id": alert.user_id,
        "rule_id": alert.rule_id,
        "subject": alert.subject,
        "severity": alert.severity.value,
        "message": alert.message,
        "status": alert.status.value,
        "raised_at": iso(alert.raised_at),
        "resolved_at": iso(alert.resolved_at) if alert.resolved_at else None,
        "details": dict(alert.details),
        "evidence": {
            "entities": list(alert.evidence.entities),
            "fact_ids": list(alert.evidence.fact_ids),
            "sources": list(alert.evidence.sources),
        },
    }


def alert_from_dict(data: Mapping[str, Any]) -> Alert:
    ev = data["evidence"]
    return Alert(
        data["alert_id"], data["user_id"], data["rule_id"], data["subject"],
        Severity(data["severity"]), data["message"], AlertStatus(data["status"]),
        to_utc(data["raised_at"]),
        Evidence(tuple(ev["entities"]), tuple(ev["fact_ids"]), tuple(ev["sources"])),
        dict(data.get("details") or {}),
        to_utc(data["resolved_at"]) if data.get("resolved_at") else None,
        int(data.get("version", 1)),
    )


def alert_event_to_dict(event: AlertEvent) -> dict[str, Any]:
    return {"kind": event.kind.value, "at": iso(event.at), "alert": alert_to_dict(event.alert)}


def alert_event_from_dict(data: Mapping[str, Any]) -> AlertEvent:
    return AlertEvent(AlertEventKind(data["kind"]), alert_from_dict(data["alert"]),
                      to_utc(data["at"]))


def state_change_to_dict(change: StateChange) -> dict[str, Any]:
    return {
        "user_id": change.user_id,
        "state_version": change.state_version,
        "window_id": change.window_id,
        "now": iso(change.now),
        "changes": [[c.entity_type, c.entity_id, c.kind.value] for c in change.changes],
        "version": change.version,
    }


def state_change_from_dict(data: Mapping[str, Any]) -> StateChange:
    return StateChange(
        data["user_id"], int(data["state_version"]), int(data["window_id"]), to_utc(data["now"]),
        tuple(EntityChange(t, i, ChangeKind(k)) for t, i, k in data["changes"]),
        int(data.get("version", 1)),
    )
