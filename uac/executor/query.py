"""Read-only SQL over one user's typed state: checked against an allow-list, then scoped.

A query must be a single SELECT (CTEs, joins, subqueries and window functions
are fine) that names only the tables :data:`QUERYABLE` lists, unqualified; no
table functions (no file or URL readers), no time travel. It then runs against
temporary views that hold only the asked-for user's rows, on a connection with
external access disabled, so no SQL can read another user's data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from uac.errors import QueryError

MAX_SQL_CHARS = 20_000
QUERY_TIMEOUT = 10.0  # seconds a query may run before it is stopped (Settings.query_timeout)
MAX_ROWS = 100_000  # rows a query may return; more is refused (aggregate, or add a LIMIT)


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Column names and rows of a query."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def scalar(self) -> Any:
        """The single value of a one-row, one-column result."""
        if len(self.rows) != 1 or len(self.columns) != 1:
            raise QueryError(f"expected one value, got {len(self.rows)} row(s) "
                             f"of {len(self.columns)} column(s)")
        return self.rows[0][0]


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _cte_names(tree: Any) -> set[str]:
    names: set[str] = set()
    for node in _walk(tree):
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            names.update(str(item.get("key", "")).lower() for item in cte_map.get("map", []))
    return names


def check_select(parse_tree_json: str, allowed: frozenset[str]) -> None:
    """Raise :class:`QueryError` unless the parsed statement is a safe single SELECT.

    ``parse_tree_json`` is DuckDB's ``json_serialize_sql`` output for the statement.
    """
    tree = orjson.loads(parse_tree_json)
    if tree.get("error"):
        message = tree.get("error_message", "cannot parse")
        if "Only SELECT" in message:
            message = "only read-only SELECT queries are allowed"
        raise QueryError(message)
    statements = tree.get("statements", [])
    if len(statements) != 1:
        raise QueryError(f"exactly one statement is allowed, got {len(statements)}")
    ctes = _cte_names(tree)
    for node in _walk(statements[0]):
        kind = node.get("type")
        if kind == "TABLE_FUNCTION":
            raise QueryError("table functions (file or URL readers, query()) are not allowed")
        if kind == "BASE_TABLE":
            name = str(node.get("table_name", "")).lower()
            if node.get("schema_name") or node.get("catalog_name"):
                raise QueryError(f"qualified table names are not allowed: {name!r}")
            if node.get("at_clause"):
                raise QueryError("time travel (AT clauses) is not allowed")
            if name not in allowed and name not in ctes:
                raise QueryError(
                    f"unknown table {name!r}; queryable tables: {', '.join(sorted(allowed))}"
                )


def validate_sql(sql: str) -> str:
    if not isinstance(sql, str) or not sql.strip():
        raise QueryError("empty query")
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(f"query longer than {MAX_SQL_CHARS} characters")
    return sql.strip().rstrip(";")
