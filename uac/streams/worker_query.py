"""The worker's query side: state, facts, alerts and SQL for a user, independent of faust.

A user lives on one partition of ``uac.facts`` (:func:`~uac.streams.topics.partition_for`), and one
worker of the group owns it: its :class:`~uac.streams.worker_checkpoint.CheckpointAgent` holds the
partition's state in memory. :meth:`QuerySide.respond` answers ``/users/{user}/{kind}``:

* this worker owns the partition and has rebuilt it: the JSON of ``uac state|facts|alerts|query
  --json`` (:mod:`uac.render`); 404 for a user without facts there, 400 for refused SQL;
* it owns it but is still rebuilding it (after an assignment): 503 with ``Retry-After``;
* another worker owns it: the request goes to that worker's URL, once (a forwarded request
  carries ``X-Uac-Forwarded-By``, and a worker that gets one for a partition it does not own
  answers 421 rather than forwarding again), and its answer comes back with ``X-Uac-Forwarded-To``;
  an unknown or unreachable owner gives 503, naming the owner when known.

Finding the owner (``owners``): the group's assignment as faust distributes it. Every member puts
its web URL (faust's ``canonical_url``: ``uac worker --advertise-url``) in its group metadata, and
with each assignment the group leader sends every member the URL -> {topic: partitions} map of the
whole group (``app.assignor.external_topics_metadata()``). It is as current as the last rebalance;
a request that races one gets a 503 or a 421, to retry. Advertised URLs must differ per worker.

Rebuilt (:class:`Rebuilds`): the partition's end offset at assignment was consumed, and the agent's
log up to that point is folded (the window holding the last record is closed). SQL runs in a thread
on a fresh in-memory :class:`~uac.checkpointer.duckdb_store.DuckDBStateStore` holding only the
user's state, with the store's own checks and per-user views; there ``facts.log_offset`` is the
fact's position among the user's facts (the worker has no log file).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from uac.api import fact_views, select_alerts
from uac.checkpointer.duckdb_store import DuckDBStateStore
from uac.checkpointer.fold import fold
from uac.checkpointer.records import CommitBatch
from uac.checkpointer.state import UserState
from uac.checkpointer.store import StateStore
from uac.errors import QueryError
from uac.executor.alerts import AlertStatus
from uac.executor.query import QUERY_TIMEOUT, QueryResult
from uac.render import alert_records, dumps, entity_records, fact_records, query_record
from uac.streams.codec import encode_record
from uac.streams.topics import partition_for
from uac.streams.worker_checkpoint import CheckpointAgent

log = logging.getLogger(__name__)
FORWARDED_BY = "X-Uac-Forwarded-By"
FORWARDED_TO = "X-Uac-Forwarded-To"
SERVED_BY = "X-Uac-Worker"
KINDS = ("state", "facts", "alerts", "query")
RETRY_AFTER = 2
JSON_TYPE = "application/json"
NEEDS_CHECKPOINT = ("the query side needs the checkpoint agent: start the worker with --checkpoint "
                    "(UAC_WORKER_CHECKPOINT=1)")

Owners = Callable[[], Mapping[str, Mapping[str, Sequence[int]]]]
"""The group's URL -> {topic: partitions} map (faust's external topic distribution)."""
EndOffsets = Callable[[list[int]], Awaitable[Mapping[int, int]]]
"""``await end_offsets(partitions)``: the end offset of each of these ``uac.facts`` partitions."""


class Request(Protocol):
    """What is read from a web request (aiohttp's, which faust's web server passes on)."""

    @property
    def method(self) -> str: ...
    @property
    def raw_path(self) -> str: ...
    @property
    def query(self) -> Mapping[str, str]: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    async def read(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer: status, JSON body, headers."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, data: Any, headers: Mapping[str, str] | None = None) -> Reply:
        return cls(status, dumps(data), dict(headers or {}))

    def data(self) -> Any:
        return orjson.loads(self.body)


def error(status: int, message: str, *, retry: bool = False, **details: Any) -> Reply:
    """``{"error": message, ...details}``; ``retry`` adds ``Retry-After``."""
    return Reply.json(status, {"error": message, **details},
                      {"Retry-After": str(RETRY_AFTER)} if retry else None)


# -- answers from a partition's store ---------------------------------------------------------------

def user_batch(store: StateStore, user: str) -> CommitBatch:
    """The user's whole state in ``store`` as one commit batch (for a fresh store)."""
    facts = [(i, f, encode_record(f)) for i, f in enumerate(store.load_facts(user))]
    entities = {(user, r.entity_type, r.entity_id): replace(r, is_new=True) for r in store.entities(user)}
    return CommitBatch(store.checkpoint(), facts, entities, store.state_changes(user),
                       store.alert_events(user))


def run_query(batch: CommitBatch, user: str, sql: str,
              timeout: float | None = QUERY_TIMEOUT) -> QueryResult:
    """``sql`` for ``user`` over ``batch`` in a fresh in-memory DuckDB store (raises QueryError;
    QueryTimeoutError once it has run ``timeout`` seconds)."""
    db = DuckDBStateStore(":memory:")
    try:
        db.commit(batch)
        return db.query(user, sql, timeout=timeout)
    finally:
        db.close()


def answer(store: StateStore, kind: str, user: str, status: AlertStatus | None = None) -> Any:
    """The JSON of ``uac state|facts|alerts USER --json`` from ``store``."""
    if kind == "state":
        return entity_records(store.entities(user))
    if kind == "facts":
        folded = fold(store.load_facts(user)).get(user) or UserState(user)
        return fact_records(fact_views(folded))
    if kind == "alerts":
        return alert_records(select_alerts(store.alerts(user), status))
    raise ValueError(f"no plain answer for {kind!r}")


# -- which partitions are owned and rebuilt -------------------------------------------------------

class Rebuilds:
    """The ``uac.facts`` partitions this worker owns, and which of them it has rebuilt.

    The worker calls :meth:`assigned` and :meth:`revoked` on rebalances, :meth:`set_ends` with the
    end offsets at assignment, and :meth:`seen` after the agent took each record."""

    def __init__(self, agent: CheckpointAgent) -> None:
        self.agent = agent
        self.owned: set[int] = set()
        self._end: dict[int, int] = {}
        self._seen: dict[int, int] = {}
        self._need: dict[int, int] = {}
        self._ready: set[int] = set()

    def assigned(self, partitions: Iterable[int]) -> None:
        """The whole new assignment: a partition the agent holds no state for starts over."""
        new = set(partitions)
        for p in self.owned | new:
            if p not in new or self.agent.store(p) is None:
                self._forget(p)
        self.owned = new

    def revoked(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self._forget(p)
            self.owned.discard(p)

    def _forget(self, p: int) -> None:
        for known in (self._end, self._seen, self._need):
            known.pop(p, None)
        self._ready.discard(p)

    def missing_ends(self) -> list[int]:
        return sorted(p for p in self.owned if p not in self._end and p not in self._ready)

    def set_ends(self, ends: Mapping[int, int]) -> None:
        for p, end in ends.items():
            if p in self.owned and p not in self._ready:
                self._end[p] = end

    def seen(self, partition: int, offset: int) -> None:
        """The agent took the record at ``offset`` of ``partition`` (every record before it too)."""
        if partition in self.owned and partition not in self._ready:
            self._seen[partition] = offset
            self._reached(partition)

    def _reached(self, p: int) -> None:
        """Once the end offset is consumed: how much of the agent's log must be folded."""
        end = self._end.get(p)
        if end is not None and p not in self._need and self._seen.get(p, -1) >= end - 1:
            self._need[p] = self.agent.log_end(p)

    def ready(self, p: int) -> bool:
        """Whether ``p`` is owned and rebuilt (it stays so until revoked)."""
        if p in self._ready:
            return True
        if p not in self.owned or p not in self._end or not self.agent.holds(p):
            return False  # not ours, end offset unknown yet, or not restored yet
        if self._end[p] > 0:
            self._reached(p)
            if (p not in self._need or self.agent.store(p) is None
                    or self.agent.folded_offset(p) < self._need[p]):
                return False
        self._ready.add(p)
        log.info("partition %d rebuilt (end offset %d): answering its users", p, self._end[p])
        return True


# -- the requests -----------------------------------------------------------------------------------

class QuerySide:
    """Answers ``/users/{user}/{kind}`` for one worker (see the module docstring)."""

    def __init__(self, agent: CheckpointAgent, rebuilds: Rebuilds, *, worker_id: str, url: str,
                 facts_topic: str, partitions: int, owners: Owners = dict,
                 end_offsets: EndOffsets | None = None, timeout: float = 10.0,
                 query_timeout: float = QUERY_TIMEOUT) -> None:
        self.agent = agent
        self.rebuilds = rebuilds
        self.worker_id = worker_id
        self.url = url.rstrip("/")
        self.facts_topic = facts_topic
        self.partitions = partitions
        self.owners = owners
        self.end_offsets = end_offsets
        self.timeout = timeout
        self.query_timeout = query_timeout
        self._tasks: set[asyncio.Future[None]] = set()

    def assigned(self, partitions: Iterable[int]) -> None:
        """A new assignment of ``uac.facts``; its end offsets are asked for in the background (a
        rebalance does not wait for them)."""
        self.rebuilds.assigned(partitions)
        task = asyncio.ensure_future(self.fill_ends())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def respond(self, kind: str, user: str, request: Request) -> Reply:
        """The reply to ``request`` for ``/users/{user}/{kind}``; ``X-Uac-Worker`` names who answered."""
        reply = await self._respond(kind, user, request)
        reply.headers.setdefault(SERVED_BY, self.worker_id)
        return reply

    async def _respond(self, kind: str, user: str, request: Request) -> Reply:
        if kind not in KINDS:
            return error(404, f"unknown resource {kind!r}; one of {', '.join(KINDS)}")
        partition = partition_for(user, self.partitions)
        if partition in self.rebuilds.owned:
            return await self._local(kind, user, partition, request)
        owner = self.owner(partition)
        by = request.headers.get(FORWARDED_BY)
        if by is not None:
            return error(421, f"worker {self.worker_id} ({self.url}) does not own partition {partition} "
                              f"(forwarded by {by}); the group may be rebalancing, retry",
                         partition=partition, owner=owner)
        if owner is None or owner == self.url:
            return error(503, f"no worker is known to own partition {partition} (the group may be "
                              "rebalancing); retry", retry=True, partition=partition, owner=owner)
        return await self._forward(owner, partition, request)

    def owner(self, partition: int) -> str | None:
        """The advertised URL of the worker that owns ``partition`` of ``uac.facts``, if known."""
        for url, topics in self.owners().items():
            if partition in topics.get(self.facts_topic, ()):
                return str(url).rstrip("/")
        return None

    async def fill_ends(self) -> None:
        """Ask for the end offsets of owned partitions that lack one (again at the next request if
        that fails)."""
        missing = self.rebuilds.missing_ends()
        if not missing or self.end_offsets is None:
            return
        try:
            self.rebuilds.set_ends(await self.end_offsets(missing))
        except Exception as exc:  # any failure: asked again at the next request
            log.warning("end offsets of partitions %s unavailable: %r", missing, exc)

    async def _local(self, kind: str, user: str, partition: int, request: Request) -> Reply:
        if not self.rebuilds.ready(partition):
            await self.fill_ends()
            if not self.rebuilds.ready(partition):
                return error(503, f"worker {self.worker_id} is rebuilding partition {partition} from "
                                  "uac.facts; retry shortly", retry=True, partition=partition)
        store = self.agent.store(partition)
        if store is None or store.user_version(user) == 0:  # a user with facts has a state version
            return error(404, f"unknown user {user!r}: no facts on partition {partition}",
                         partition=partition)
        if kind == "query":
            return await self._query(store, user, request)
        status = request.query.get("status")
        if status not in (None, "open", "resolved"):
            return error(400, f"status must be open or resolved, not {status!r}")
        return Reply.json(200, answer(store, kind, user, AlertStatus(status) if status else None))

    async def _query(self, store: StateStore, user: str, request: Request) -> Reply:
        sql = await sql_of(request)
        if sql is None:
            return error(400, 'no SQL: give it as ?sql=... or as the POST body (text, or JSON {"sql": ...})')
        batch = user_batch(store, user)  # a snapshot, taken on the event loop
        try:
            result = await asyncio.to_thread(run_query, batch, user, sql, self.query_timeout)
        except QueryError as exc:
            return error(400, str(exc))
        return Reply.json(200, query_record(result))

    async def _forward(self, owner: str, partition: int, request: Request) -> Reply:
        """One hop to the owner; its reply as it is."""
        import aiohttp

        headers = {FORWARDED_BY: f"{self.worker_id} {self.url}"}
        if "Content-Type" in request.headers:
            headers["Content-Type"] = request.headers["Content-Type"]
        body = await request.read() if request.method == "POST" else None
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session, session.request(
                    request.method, owner + request.raw_path, data=body, headers=headers) as resp:
                payload = await resp.read()
                kept = {k: resp.headers[k] for k in (SERVED_BY, "Retry-After") if k in resp.headers}
                return Reply(resp.status, payload, {**kept, FORWARDED_TO: owner})
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("forwarding to %s (partition %d) failed: %r", owner, partition, exc)
            return error(503, f"the owner of partition {partition}, {owner}, is unreachable "
                              f"({exc!r}); retry", retry=True, partition=partition, owner=owner)


def default_url(bind: str, port: int) -> str:
    """``http://BIND:PORT``, with this host's name for a wildcard bind (0.0.0.0 is no address to
    reach a worker at)."""
    host = socket.gethostname() if bind in ("", "0.0.0.0", "::") else bind
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def sql_of(request: Request) -> str | None:
    """The SQL of a query request: ``?sql=``, or a POST body (plain text or JSON ``{"sql": ...}``)."""
    if request.method != "POST":
        return request.query.get("sql")
    body = (await request.read()).decode("utf-8", "replace")
    if body.lstrip().startswith("{"):
        try:
            sql = orjson.loads(body).get("sql")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return sql if isinstance(sql, str) else None
    return body or None
