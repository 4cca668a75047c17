"""The JSON of the reading commands (``uac state|facts|alerts|query --json``), shared by the CLI and
the worker's web server (:mod:`uac.streams.worker_query`), so both give the same shapes."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from uac.domains.facts import iso
from uac.streams.codec import alert_to_dict, fact_to_dict

if TYPE_CHECKING:
    from uac.api import FactView
    from uac.checkpointer.records import EntityRow
    from uac.executor.alerts import Alert
    from uac.executor.query import QueryResult


def json_default(value: Any) -> Any:
    """What orjson cannot encode itself: times as ISO 8601 (UTC), sets as lists, the rest as text."""
    if isinstance(value, datetime):
        return iso(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def dumps(data: Any, *, indent: bool = True) -> bytes:
    """JSON bytes as the CLI prints them (indented unless ``indent`` is false)."""
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    return orjson.dumps(data, default=json_default, option=option)


def entity_records(rows: Iterable[EntityRow]) -> list[dict[str, Any]]:
    """``uac state --json``."""
    return [{"entity_type": r.entity_type, "entity_id": r.entity_id, "attributes": r.attributes,
             "state_version": r.state_version} for r in rows]


def fact_records(views: Iterable[FactView]) -> list[dict[str, Any]]:
    """``uac facts --json``."""
    return [{**fact_to_dict(v.fact), "status": v.status.value,
             "superseded_by": list(v.superseded_by)} for v in views]


def alert_records(alerts: Iterable[Alert]) -> list[dict[str, Any]]:
    """``uac alerts --json``."""
    return [alert_to_dict(a) for a in alerts]


def query_record(result: QueryResult) -> dict[str, Any]:
    """``uac query --json``."""
    return {"columns": list(result.columns), "rows": result.rows}
