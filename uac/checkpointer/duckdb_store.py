"""The DuckDB state store: the derived, queryable view of typed state (the embedded default).

Tables live in schema ``store``: ``facts``, ``entities`` (current values as
JSON), one typed table per entity type (``trips``, ``medications``, ...),
``alerts``, ``alert_events``, ``state_changes`` and ``meta`` (the checkpoint).
It is rebuildable from the log at any time (``uac replay``).

DuckDB allows one writing process or many reading ones. Readers and writers
that find the file locked retry until ``lock_timeout`` and then raise
:class:`~uac.errors.StoreBusyError`; a writer opened with ``share=True``
releases the file at the first commit after holding it ``hold_seconds`` (0.5 s),
or after being idle that long, and reopens it on the next use, so readers get
their turn between commits without every commit paying for a reopen.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import orjson

from uac.checkpointer.records import Checkpoint, CommitBatch, EntityRow, StateChange
from uac.checkpointer.store import StateStore
from uac.domains.catalog import GENERIC_TYPE, SQL_TYPES, EntityType, entity_types
from uac.domains.facts import Fact, iso, to_utc
from uac.errors import StoreBusyError, StoreError
from uac.executor.alerts import Alert, AlertEvent
from uac.executor.query import MAX_ROWS, QUERY_TIMEOUT, QueryResult, check_select, validate_sql
from uac.streams.codec import (
    alert_event_from_dict,
    alert_event_to_dict,
    alert_from_dict,
    alert_to_dict,
    decode_record,
    state_change_from_dict,
)

log = logging.getLogger(__name__)
SCHEMA_VERSION = 2
"""2: ``entities.entity_key`` (one indexed column: DuckDB uses an index for one-column equality)."""
T = TypeVar("T")

_BASE_DDL = """
CREATE SCHEMA IF NOT EXISTS store;
CREATE TABLE IF NOT EXISTS store.meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS store.facts (
  log_offset BIGINT, fact_id VARCHAR, user_id VARCHAR, entity_type VARCHAR, entity_id VARCHAR,
  record VARCHAR);
CREATE TABLE IF NOT EXISTS store.entities (
  user_id VARCHAR, entity_type VARCHAR, entity_id VARCHAR, attributes JSON, state_version BIGINT,
  entity_key VARCHAR);
CREATE TABLE IF NOT EXISTS store.alerts (
  alert_id VARCHAR, user_id VARCHAR, rule_id VARCHAR, subject VARCHAR, severity VARCHAR,
  status VARCHAR, message VARCHAR, raised_at TIMESTAMP, resolved_at TIMESTAMP, details JSON,
  evidence JSON, record VARCHAR);
CREATE TABLE IF NOT EXISTS store.alert_events (
  seq BIGINT, window_id BIGINT, user_id VARCHAR, alert_id VARCHAR, kind VARCHAR, event_time TIMESTAMP,
  record VARCHAR);
CREATE TABLE IF NOT EXISTS store.state_changes (
  user_id VARCHAR, state_version BIGINT, window_id BIGINT, now TIMESTAMP, changes JSON);
CREATE INDEX IF NOT EXISTS entities_by_key ON store.entities (entity_key);
CREATE INDEX IF NOT EXISTS alerts_by_id ON store.alerts (alert_id);
"""
HIDDEN_COLUMNS = {"entities": ("entity_key",)}
"""Columns of the store that user queries do not see (they serve uac's own writes)."""


def entity_key(user_id: str, entity_type: str, entity_id: str) -> str:
    """The value of ``entities.entity_key``: the three ids joined by a unit separator."""
    return f"{user_id}\x1f{entity_type}\x1f{entity_id}"

USER_TABLES = ("facts", "entities", "alerts", "alert_events", "state_changes")
"""Tables every user can query (besides the typed ones)."""


def typed_tables() -> dict[str, EntityType]:
    """Typed table name -> entity type."""
    return {t.table: t for t in entity_types()}


def queryable_tables() -> frozenset[str]:
    return frozenset(USER_TABLES) | frozenset(typed_tables())


FACTS_VIEW = """SELECT user_id, log_offset, fact_id, entity_type, entity_id,
  json_extract_string(record, '$.op') AS op,
  json_extract(record, '$.attributes') AS attributes,
  TRY_CAST(json_extract_string(record, '$.valid_time') AS TIMESTAMP) AS valid_time,
  TRY_CAST(json_extract_string(record, '$.observed_time') AS TIMESTAMP) AS observed_time,
  TRY_CAST(json_extract_string(record, '$.confidence') AS DOUBLE) AS confidence,
  TRY_CAST(json_extract(record, '$.provenance') AS VARCHAR[]) AS provenance,
  TRY_CAST(json_extract(record, '$.supersedes') AS VARCHAR[]) AS supersedes,
  json_extract_string(record, '$.source') AS source
FROM store.facts"""
"""What ``facts`` looks like to a query: typed columns read from the stored record."""


_BATCH_COLUMNS = "user_id, entity_type, entity_id, attributes, state_version, present, extra"
"""The columns of an entity batch (the registered Arrow table, or a VALUES list)."""


def _typed_select(etype: EntityType, source: str = "uac_entities") -> str:
    """SQL that turns rows of the entity batch into the typed table's columns."""
    cols = []
    for spec in etype.fields:
        if spec.kind == "json":
            cols.append("extra")
        elif spec.kind == "list":
            cols.append(f"TRY_CAST(json_extract(attributes, '$.{spec.name}') AS VARCHAR[])")
        else:
            cols.append(f"TRY_CAST(json_extract_string(attributes, '$.{spec.name}') "
                        f"AS {SQL_TYPES[spec.kind]})")
    return (f"SELECT user_id, entity_id, {', '.join(cols)} FROM {source} "
            f"WHERE present AND entity_type = '{etype.name}'")


def _typed_ddl(etype: EntityType) -> str:
    cols = ", ".join(f'"{f.name}" {SQL_TYPES[f.kind]}' for f in etype.fields)
    return (f"CREATE TABLE IF NOT EXISTS store.{etype.table} "
            f"(user_id VARCHAR, entity_id VARCHAR, {cols});")


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Any:
    """The first row of a query (None if it has none), with the result fully consumed."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


def _naive(value: datetime | None) -> datetime | None:
    return value.astimezone(UTC).replace(tzinfo=None) if value else None


class DuckDBStateStore(StateStore):
    """State in a DuckDB file (or ``:memory:``). See the module docstring for locking."""

    def __init__(self, path: Path | str, *, read_only: bool = False, lock_timeout: float = 30.0,
                 share: bool = False, hold_seconds: float = 0.5) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self.share = share and self.path != ":memory:"
        self.hold_seconds = hold_seconds
        self._con: duckdb.DuckDBPyConnection | None = None
        self._opened_at = 0.0
        self._scoped_user: str | None = None
        self._lock = threading.RLock()
        self._idle_timer: threading.Timer | None = None
        if read_only and self.path != ":memory:" and not Path(self.path).exists():
            raise StoreError(f"no state store at {self.path}: ingest something first "
                             "(uac ingest FILE) or point --data-dir at an existing one")
        con = self._connection()
        if not read_only:
            self._create_schema(con)
        if self.share:
            self.release()

    # -- connections ---------------------------------------------------------------------------
    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is not None:
            return self._con
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.02
        while True:
            try:
                self._con = duckdb.connect(self.path, read_only=self.read_only)
                self._opened_at = time.monotonic()
                return self._con
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise StoreError(f"cannot open {self.path}: {exc}") from None
                if time.monotonic() >= deadline:
                    raise StoreBusyError(
                        f"the state store {self.path} is held by another uac process "
                        f"(waited {self.lock_timeout:.0f}s); retry when it finishes, or raise "
                        "UAC_LOCK_TIMEOUT / --wait"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def release(self) -> None:
        """Close the connection so other processes can open the file (reopened on demand)."""
        with self._lock:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            if self._con is not None:
                self._con.close()
                self._con = None
                self._scoped_user = None

    def _after_commit(self) -> None:
        """In ``share`` mode: let other processes in after ``hold_seconds`` of holding the file,
        or once the writer has been idle that long, whichever comes first."""
        if time.monotonic() - self._opened_at >= self.hold_seconds:
            self.release()
            return
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = threading.Timer(self.hold_seconds, self.release)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def close(self) -> None:
        self.release()

    def _create_schema(self, con: duckdb.DuckDBPyConnection) -> None:
        found = None
        with contextlib.suppress(duckdb.CatalogException):  # a new file has no meta table
            found = _one(con, "SELECT value FROM store.meta WHERE key = 'schema_version'")
        if found is not None and found[0] != str(SCHEMA_VERSION):
            raise StoreError(
                f"{self.path} has store schema {found[0]}; this uac writes schema "
                f"{SCHEMA_VERSION}: run `uac replay` to rebuild the store from the log")
        con.execute(_BASE_DDL)
        for etype in entity_types():
            con.execute(_typed_ddl(etype))
        con.execute("INSERT OR REPLACE INTO store.meta VALUES ('schema_version', ?)",
                    [str(SCHEMA_VERSION)])

    def _read(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        with self._lock:
            con = self._connection()
            try:
                return fn(con)
            except duckdb.CatalogException as exc:
                raise StoreError(f"{self.path} is not a uac state store ({exc})") from None

    # -- the checkpointer's side ---------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        def read(con: duckdb.DuckDBPyConnection) -> Checkpoint:
            row = _one(con, "SELECT value FROM store.meta WHERE key = 'checkpoint'")
            if row is None:
                return Checkpoint()
            data = orjson.loads(row[0])
            wm = data.get("watermark")
            return Checkpoint(data["log_offset"], data["window_id"],
                              to_utc(wm) if wm else None, data.get("alert_seq", 0))
        return self._read(read)

    def commit(self, batch: CommitBatch) -> None:
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only")
        with self._lock:
            con = self._connection()
            try:
                con.execute("BEGIN TRANSACTION")
                self._write(con, batch)
                cp = batch.checkpoint
                value = orjson.dumps({"log_offset": cp.log_offset, "window_id": cp.window_id,
                                      "alert_seq": cp.alert_seq,
                                      "watermark": iso(cp.watermark) if cp.watermark else None})
                updated = _one(con, "UPDATE store.meta SET value = ? WHERE key = 'checkpoint'",
                               [value.decode()])
                if not updated or not updated[0]:  # the first commit (UPDATE is 4x cheaper)
                    con.execute("INSERT INTO store.meta VALUES ('checkpoint', ?)",
                                [value.decode()])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            finally:
                if self.share:
                    self._after_commit()

    _SMALL = 64
    _FEW = 4
    """Up to this many keys, rows are deleted by key, one statement each (a DELETE joined
    with a registered batch scans the whole table: 4x slower for one row)."""

    def _insert(self, con: duckdb.DuckDBPyConnection, table: str,
                columns: dict[str, list[Any]]) -> None:
        """Insert rows given as columns: one VALUES statement when few, Arrow when many."""
        rows = len(next(iter(columns.values())))
        if rows <= self._SMALL:
            marks = "(" + ", ".join("?" * len(columns)) + ")"
            params = [value for row in zip(*columns.values(), strict=True) for value in row]
            con.execute(f"INSERT INTO store.{table} VALUES {', '.join([marks] * rows)}", params)
            return
        import pyarrow as pa

        con.register("uac_batch", pa.table(columns))
        try:
            con.execute(f"INSERT INTO store.{table} SELECT * FROM uac_batch")
        finally:
            con.unregister("uac_batch")

    def _write(self, con: duckdb.DuckDBPyConnection, batch: CommitBatch) -> None:
        if batch.facts:
            self._write_facts(con, batch.facts)
        if batch.entities:
            self._write_entities(con, batch.entities)
        if batch.alert_events:
            self._write_alerts(con, batch.alert_events)
        if batch.state_changes:
            changes = batch.state_changes
            self._insert(con, "state_changes", {
                "user_id": [c.user_id for c in changes],
                "state_version": [c.state_version for c in changes],
                "window_id": [c.window_id for c in changes],
                "now": [_naive(c.now) for c in changes],
                "changes": [orjson.dumps([[x.entity_type, x.entity_id, x.kind.value]
                                          for x in c.changes]).decode() for c in changes],
            })

    def _replace_keys(self, con: duckdb.DuckDBPyConnection, table: str, keys: tuple[str, ...],
                      columns: dict[str, list[Any]]) -> None:
        """Delete the rows of ``table`` whose key columns match the given key rows."""
        rows = list(zip(*columns.values(), strict=True))
        if len(rows) <= self._FEW:
            cond = " AND ".join(f"{k} = ?" for k in keys)
            for row in rows:
                con.execute(f"DELETE FROM store.{table} WHERE {cond}", list(row))
            return
        import pyarrow as pa

        con.register("uac_keys", pa.table(columns))
        try:
            cond = " AND ".join(f"t.{k} = k.{k}" for k in keys)
            con.execute(f"DELETE FROM store.{table} t USING uac_keys k WHERE {cond}")
        finally:
            con.unregister("uac_keys")

    def _write_facts(self, con: duckdb.DuckDBPyConnection,
                     facts: list[tuple[int, Fact, bytes]]) -> None:
        self._insert(con, "facts", {
            "log_offset": [o for o, _, _ in facts],
            "fact_id": [f.fact_id for _, f, _ in facts],
            "user_id": [f.user_id for _, f, _ in facts],
            "entity_type": [f.entity_type for _, f, _ in facts],
            "entity_id": [f.entity_id for _, f, _ in facts],
            "record": [raw.decode() for _, _, raw in facts],
        })

    def _write_entities(self, con: duckdb.DuckDBPyConnection,
                        entities: dict[tuple[str, str, str], EntityRow]) -> None:
        """Replace the touched entities' rows in ``entities`` and in the typed tables.

        Python hands DuckDB one batch (ids + attributes as JSON); DuckDB casts the
        typed columns itself (``TRY_CAST``: a value that does not fit becomes NULL).
        """
        rows = list(entities.values())
        generic = {t.name: t for t in entity_types()}.get(GENERIC_TYPE)
        known = {f.name for f in generic.fields} if generic else set()
        columns: dict[str, list[Any]] = {
            "user_id": [r.user_id for r in rows],
            "entity_type": [r.entity_type for r in rows],
            "entity_id": [r.entity_id for r in rows],
            "attributes": [orjson.dumps(r.attributes, option=orjson.OPT_SORT_KEYS).decode()
                           for r in rows],
            "state_version": [r.state_version for r in rows],
            "entity_key": [entity_key(r.user_id, r.entity_type, r.entity_id) for r in rows],
            "present": [r.exists for r in rows],
            "extra": [orjson.dumps({k: v for k, v in r.attributes.items() if k not in known}
                                   ).decode() if r.entity_type == GENERIC_TYPE else None
                      for r in rows],
        }
        types = {t.name: t for t in entity_types()}
        written = [types[n] for n in sorted({r.entity_type for r in rows}) if n in types]
        if len(rows) <= self._FEW:
            self._write_few_entities(con, rows, columns, written)
            return
        import pyarrow as pa

        batch = pa.table({**columns,
                          "state_version": pa.array(columns["state_version"], pa.int64()),
                          "present": pa.array(columns["present"], pa.bool_())})
        con.register("uac_entities", batch)
        try:
            self._delete_matching(con, "entities", ("entity_key",))
            con.execute("INSERT INTO store.entities SELECT user_id, entity_type, entity_id, "
                        "attributes, state_version, entity_key FROM uac_entities WHERE present")
            for etype in written:
                self._delete_matching(con, etype.table, ("user_id", "entity_id"),
                                      f"k.entity_type = '{etype.name}'")
                con.execute(f"INSERT INTO store.{etype.table} {_typed_select(etype)}")
        finally:
            con.unregister("uac_entities")

    def _write_few_entities(self, con: duckdb.DuckDBPyConnection, rows: list[EntityRow],
                            columns: dict[str, list[Any]], written: list[EntityType]) -> None:
        """The same as the batch path for a handful of rows: deletes by key, VALUES inserts."""
        old = [r for r in rows if not r.is_new]  # created in this batch: no row to replace
        self._replace_keys(con, "entities", ("entity_key",), {
            "entity_key": [entity_key(r.user_id, r.entity_type, r.entity_id) for r in old]})
        for etype in written:
            mine = [r for r in old if r.entity_type == etype.name]
            self._replace_keys(con, etype.table, ("user_id", "entity_id"), {
                "user_id": [r.user_id for r in mine], "entity_id": [r.entity_id for r in mine]})
        present = [i for i, r in enumerate(rows) if r.exists]
        if not present:
            return
        self._insert(con, "entities", {
            k: [columns[k][i] for i in present]
            for k in ("user_id", "entity_type", "entity_id", "attributes", "state_version",
                      "entity_key")})
        names = _BATCH_COLUMNS.split(", ")
        marks = "(" + ", ".join("?" * len(names)) + ")"
        for etype in written:
            chosen = [i for i in present if rows[i].entity_type == etype.name]
            if not chosen:
                continue
            values = ", ".join([marks] * len(chosen))
            source = f"(VALUES {values}) AS uac_entities({_BATCH_COLUMNS})"
            params = [columns[n][i] for i in chosen for n in names]
            con.execute(f"INSERT INTO store.{etype.table} {_typed_select(etype, source)}", params)

    def _delete_matching(self, con: duckdb.DuckDBPyConnection, table: str,
                         keys: tuple[str, ...], where: str = "true") -> None:
        """Delete rows of ``table`` whose keys appear in the registered ``uac_entities`` batch."""
        cond = " AND ".join(f"t.{k} = k.{k}" for k in keys)
        con.execute(f"DELETE FROM store.{table} t USING uac_entities k WHERE {cond} AND {where}")

    def _write_alerts(self, con: duckdb.DuckDBPyConnection,
                      events: list[tuple[int, int, AlertEvent]]) -> None:
        latest: dict[str, Alert] = {}
        for _, _, event in events:
            latest[event.alert.alert_id] = event.alert
        alerts = list(latest.values())
        self._replace_keys(con, "alerts", ("alert_id",), {"alert_id": list(latest)})
        self._insert(con, "alerts", {
            "alert_id": [a.alert_id for a in alerts], "user_id": [a.user_id for a in alerts],
            "rule_id": [a.rule_id for a in alerts], "subject": [a.subject for a in alerts],
            "severity": [a.severity.value for a in alerts],
            "status": [a.status.value for a in alerts], "message": [a.message for a in alerts],
            "raised_at": [_naive(a.raised_at) for a in alerts],
            "resolved_at": [_naive(a.resolved_at) for a in alerts],
            "details": [orjson.dumps(dict(a.details)).decode() for a in alerts],
            "evidence": [orjson.dumps(alert_to_dict(a)["evidence"]).decode() for a in alerts],
            "record": [orjson.dumps(alert_to_dict(a)).decode() for a in alerts],
        })
        self._insert(con, "alert_events", {
            "seq": [s for s, _, _ in events], "window_id": [w for _, w, _ in events],
            "user_id": [e.alert.user_id for _, _, e in events],
            "alert_id": [e.alert.alert_id for _, _, e in events],
            "kind": [e.kind.value for _, _, e in events],
            "event_time": [_naive(e.at) for _, _, e in events],
            "record": [orjson.dumps(alert_event_to_dict(e)).decode() for _, _, e in events],
        })

    def load_facts(self, user_id: str) -> list[Fact]:
        rows = self._read(lambda con: con.execute(
            "SELECT record FROM store.facts WHERE user_id = ? ORDER BY log_offset", [user_id]
        ).fetchall())
        out = []
        for (record,) in rows:
            fact = decode_record(record)
            assert isinstance(fact, Fact)
            out.append(fact)
        return out

    # -- the read side -------------------------------------------------------------------------
    def users(self) -> list[str]:
        rows = self._read(lambda con: con.execute(
            "SELECT DISTINCT user_id FROM store.facts ORDER BY user_id").fetchall())
        return [r[0] for r in rows]

    def user_version(self, user_id: str) -> int:
        row = self._read(lambda con: _one(
            con, "SELECT max(state_version) FROM store.state_changes WHERE user_id = ?", [user_id]))
        return int(row[0]) if row and row[0] is not None else 0

    def users_with_types(self, entity_types: Iterable[str]) -> list[str]:
        wanted = sorted(set(entity_types))
        if not wanted:
            return []
        rows = self._read(lambda con: con.execute(
            "SELECT DISTINCT user_id FROM store.entities WHERE list_contains(?, entity_type) "
            "ORDER BY user_id", [wanted]).fetchall())
        return [r[0] for r in rows]

    def entities(self, user_id: str) -> list[EntityRow]:
        rows = self._read(lambda con: con.execute(
            "SELECT entity_type, entity_id, attributes, state_version FROM store.entities "
            "WHERE user_id = ? ORDER BY entity_type, entity_id", [user_id]).fetchall())
        return [EntityRow(user_id, t, i, True, orjson.loads(a), v) for t, i, a, v in rows]

    def alerts(self, user_id: str) -> list[Alert]:
        rows = self._read(lambda con: con.execute(
            "SELECT record FROM store.alerts WHERE user_id = ? ORDER BY alert_id",
            [user_id]).fetchall())
        return [alert_from_dict(orjson.loads(r[0])) for r in rows]

    def alert_events(self, user_id: str) -> list[tuple[int, int, AlertEvent]]:
        rows = self._read(lambda con: con.execute(
            "SELECT seq, window_id, record FROM store.alert_events WHERE user_id = ? "
            "ORDER BY seq", [user_id]).fetchall())
        return [(s, w, alert_event_from_dict(orjson.loads(r))) for s, w, r in rows]

    def state_changes(self, user_id: str) -> list[StateChange]:
        rows = self._read(lambda con: con.execute(
            "SELECT state_version, window_id, now, changes FROM store.state_changes "
            "WHERE user_id = ? ORDER BY window_id, state_version", [user_id]).fetchall())
        return [state_change_from_dict({
            "user_id": user_id, "state_version": v, "window_id": w,
            "now": iso(now.replace(tzinfo=UTC)), "changes": orjson.loads(changes)})
            for v, w, now, changes in rows]

    # -- queries -------------------------------------------------------------------------------
    def query(self, user_id: str, sql: str, *, timeout: float | None = QUERY_TIMEOUT) -> QueryResult:
        """Run a read-only SELECT over ``user_id``'s rows only (see :mod:`uac.executor.query`).

        A query still running after ``timeout`` seconds (None: no limit) is interrupted and
        raises :class:`~uac.errors.QueryTimeoutError`; one returning more than
        :data:`~uac.executor.query.MAX_ROWS` rows raises :class:`~uac.errors.QueryError`.
        """
        from uac.errors import QueryError, QueryTimeoutError

        text = validate_sql(sql)

        def run(con: duckdb.DuckDBPyConnection) -> QueryResult:
            tree = _one(con, "SELECT json_serialize_sql(?)", [text])
            check_select(tree[0] if tree else "{}", queryable_tables())
            with self._scoped(con, user_id), _interrupted_after(con, timeout):
                try:
                    cursor = con.execute(text)
                    columns = tuple(d[0] for d in cursor.description or ())
                    rows = cursor.fetchmany(MAX_ROWS + 1)
                except duckdb.InterruptException:
                    raise QueryTimeoutError(
                        f"the query ran longer than {timeout:g} s and was stopped "
                        "(the limit is UAC_QUERY_TIMEOUT)") from None
                except duckdb.Error as exc:
                    raise QueryError(str(exc).strip()) from None
            if len(rows) > MAX_ROWS:
                raise QueryError(f"the query returns more than {MAX_ROWS:,} rows: aggregate, "
                                 "or add a LIMIT")
            return QueryResult(columns, rows)
        return self._read(run)

    @contextmanager
    def _scoped(self, con: duckdb.DuckDBPyConnection, user_id: str) -> Iterator[None]:
        if self._scoped_user != user_id:
            literal = "'" + user_id.replace("'", "''") + "'"
            for table in sorted(queryable_tables()):
                source = f"({FACTS_VIEW})" if table == "facts" else f"store.{table}"
                hidden = HIDDEN_COLUMNS.get(table)
                star = f"* EXCLUDE ({', '.join(hidden)})" if hidden else "*"
                con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS "
                            f"SELECT {star} FROM {source} WHERE user_id = {literal}")
            self._scoped_user = user_id
        yield


@contextmanager
def _interrupted_after(con: duckdb.DuckDBPyConnection, seconds: float | None) -> Iterator[None]:
    """Interrupt what ``con`` runs once ``seconds`` have passed (an idle interrupt is a no-op)."""
    if seconds is None:
        yield
        return
    timer = threading.Timer(seconds, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
