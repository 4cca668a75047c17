"""The worker's query side: answers equal the CLI's JSON over the same facts, a partition being rebuilt
says so, requests for another worker's user are forwarded once; then two real workers on the broker."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.test_worker import (
    WorkerProcess,
    consume,
    demo,
    expected_fact_ids,
    free_port,
    produce,
    running_worker,
)
from uac import api, render
from uac.domains.facts import Fact, Tick
from uac.errors import QueryError
from uac.settings import Settings
from uac.streams.avro import AvroCodec
from uac.streams.embedded import EmbeddedPipeline
from uac.streams.log import FileFactLog
from uac.streams.topics import partition_for, user_key
from uac.streams.worker_checkpoint import CheckpointAgent
from uac.streams.worker_extract import FACTS, Source
from uac.streams.worker_query import FORWARDED_BY, FORWARDED_TO, SERVED_BY, QuerySide, Rebuilds

DEMO_OBSERVATIONS = Path(__file__).resolve().parent.parent / "uac" / "examples" / "demo.jsonl"
PARTITIONS = 4
MAYA = partition_for("maya", PARTITIONS)
COUNT_BY_TYPE = "SELECT entity_type, count(*) AS n FROM entities GROUP BY 1 ORDER BY 1"
SPENT = "SELECT category, round(sum(amount), 2) AS spent FROM transactions GROUP BY 1 ORDER BY 1"
REFUSED = ("SELECT * FROM read_csv('/etc/passwd')", "DROP TABLE facts", "SELECT * FROM store.entities",
           "SELEC 1")


def neighbour(stem: str = "u") -> str:
    """A user other than maya on maya's partition."""
    return next(u for u in (f"{stem}{i}" for i in range(1000)) if partition_for(u, PARTITIONS) == MAYA)


def jsonish(data: Any) -> Any:
    """``data`` as it comes back from JSON (the CLI's rendering)."""
    return orjson.loads(render.dumps(data))


# -- a CheckpointAgent fed directly, served by a real aiohttp server ----------------------------------

@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, list[Fact | Tick]]:
    """The demo observations ingested the embedded way, and the facts and ticks of its log."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("embedded"))
    api.ingest(DEMO_OBSERVATIONS, settings=settings)
    with FileFactLog(settings.log_path, writer=False) as log_:
        records = [r for _, r, _ in log_.read_entries() if isinstance(r, Fact | Tick)]
    return settings, records


async def _produced() -> None:
    return None


async def send(topic: str, key: bytes | None, value: bytes | None, partition: int) -> Awaitable[None]:
    """The broker's side of ``send``: every record acknowledged at once."""
    return _produced()


@dataclass
class Node:
    """One worker's query side without faust: its agent, fed like the faust agent feeds it."""

    side: QuerySide
    now: list[float]
    fed: int = 0

    @property
    def agent(self) -> CheckpointAgent:
        return self.side.agent

    async def feed(self, records: list[Fact | Tick], partition: int = MAYA) -> None:
        codec = AvroCodec()
        for record in records:
            value = codec.encode(FACTS, record)
            source = Source(FACTS, partition, self.fed, user_key("maya"))
            await self.agent.on_fact(source, value, lambda: None)
            self.side.rebuilds.seen(partition, self.fed)
            self.fed += 1

    async def idle(self) -> None:
        self.now[0] += 60
        await self.agent.close_idle()


def node(worker_id: str, *, owners: Callable[[], Mapping[str, Mapping[str, list[int]]]] | None = None,
         ends: dict[int, int] | None = None) -> Node:
    now = [0.0]
    agent = CheckpointAgent(send, settings=Settings(), partitions=PARTITIONS, clock=lambda: now[0])

    async def end_offsets(partitions: list[int]) -> dict[int, int]:
        return {p: (ends or {}).get(p, 0) for p in partitions}

    side = QuerySide(agent, Rebuilds(agent), worker_id=worker_id, url="http://unset", facts_topic=FACTS,
                     partitions=PARTITIONS, owners=owners or dict, end_offsets=end_offsets, timeout=5)
    return Node(side, now)


@asynccontextmanager
async def served(n: Node) -> AsyncIterator[str]:
    """``n``'s query side on a real socket (as the worker routes it); its URL."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        reply = await n.side.respond(request.match_info["kind"], request.match_info["user"], request)
        return web.Response(body=reply.body, status=reply.status, headers=reply.headers,
                            content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/users/{user}/{kind}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    n.side.url = f"http://127.0.0.1:{port}"
    try:
        yield n.side.url
    finally:
        await runner.cleanup()


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    body: Any


async def call(url: str, path: str, *, sql: str | None = None, post: str | None = None,
               headers: dict[str, str] | None = None) -> Answer:
    import aiohttp

    target = url + path + (f"?sql={urllib.parse.quote(sql)}" if sql is not None else "")
    async with aiohttp.ClientSession() as session, session.request(
            "POST" if post is not None else "GET", target, data=post, headers=headers) as resp:
        return Answer(resp.status, dict(resp.headers), json.loads(await resp.read()))


async def owner_of_maya(records: list[Fact | Tick]) -> Node:
    """A node owning maya's partition with every record folded."""
    n = node("a", ends={MAYA: len(records)})
    n.side.assigned([MAYA])
    await n.feed(records)
    await n.idle()
    return n


def test_answers_are_the_clis_json_over_the_same_facts(embedded: tuple[Settings, list[Fact | Tick]]) -> None:
    settings, records = embedded

    async def scenario() -> None:
        n = await owner_of_maya(records)
        async with served(n) as url:
            state = await call(url, "/users/maya/state")
            assert state.status == 200 and state.headers[SERVED_BY] == "a"
            assert FORWARDED_TO not in state.headers
            assert state.body == jsonish(render.entity_records(api.state("maya", settings=settings)))
            facts = await call(url, "/users/maya/facts")
            assert facts.body == jsonish(render.fact_records(api.facts("maya", settings=settings)))
            assert {f["status"] for f in facts.body} >= {"current", "superseded"}
            alerts = await call(url, "/users/maya/alerts")
            assert alerts.body == jsonish(render.alert_records(api.alerts("maya", settings=settings)))
            assert {a["status"] for a in alerts.body} == {"open", "resolved"}
            opened = await call(url, "/users/maya/alerts?status=open")
            assert opened.body == [a for a in alerts.body if a["status"] == "open"]
            for sql in (COUNT_BY_TYPE, SPENT):
                expected = jsonish(render.query_record(api.query("maya", sql, settings=settings)))
                assert (await call(url, "/users/maya/query", sql=sql)).body == expected
                assert (await call(url, "/users/maya/query", post=sql)).body == expected
                assert (await call(url, "/users/maya/query", post=json.dumps({"sql": sql}))).body == expected
            spent = await call(url, "/users/maya/query", sql=SPENT)
            assert spent.body["rows"] == [["dining", 325.0], ["groceries", 64.5]]

    asyncio.run(scenario())


def test_refused_sql_unknown_users_and_bad_requests(embedded: tuple[Settings, list[Fact | Tick]]) -> None:
    settings, records = embedded

    async def scenario() -> None:
        n = await owner_of_maya(records)
        async with served(n) as url:
            for sql in REFUSED:
                with pytest.raises(QueryError) as refused:
                    api.query("maya", sql, settings=settings)
                answer = await call(url, "/users/maya/query", sql=sql)
                assert (answer.status, answer.body["error"]) == (400, str(refused.value))
            assert (await call(url, "/users/maya/query")).status == 400  # no SQL
            assert (await call(url, "/users/maya/alerts?status=closed")).status == 400
            assert (await call(url, "/users/maya/everything")).status == 404
            other = await call(url, f"/users/{neighbour()}/state")
            assert other.status == 404 and "unknown user" in other.body["error"]
            assert other.body["partition"] == MAYA

    asyncio.run(scenario())


def test_a_query_past_its_time_limit_answers_400_and_the_worker_keeps_answering(
        embedded: tuple[Settings, list[Fact | Tick]]) -> None:
    from tests.test_pipeline import ENDLESS

    _, records = embedded

    async def scenario() -> None:
        n = await owner_of_maya(records)
        n.side.query_timeout = 0.3
        async with served(n) as url:
            started = time.monotonic()
            stopped = await call(url, "/users/maya/query", sql=ENDLESS)
            assert stopped.status == 400 and "was stopped" in stopped.body["error"]
            assert time.monotonic() - started < 5
            assert (await call(url, "/users/maya/state")).status == 200
            assert (await call(url, "/users/maya/query", sql="SELECT 41 + 1")).body["rows"] == [[42]]

    asyncio.run(scenario())


def test_a_partition_being_rebuilt_answers_503_until_its_last_window_is_folded(
        embedded: tuple[Settings, list[Fact | Tick]]) -> None:
    _, records = embedded
    end = max(i for i, r in enumerate(records) if isinstance(r, Fact)) + 1  # the last record a fact

    async def scenario() -> None:
        n = node("a", ends={MAYA: end})
        n.side.assigned([MAYA])
        async with served(n) as url:
            for batch in (records[: end // 2], records[end // 2: end]):
                busy = await call(url, "/users/maya/state")
                assert busy.status == 503 and busy.headers["Retry-After"] == "2"
                assert "rebuilding partition" in busy.body["error"]
                await n.feed(batch)
            assert (await call(url, "/users/maya/state")).status == 503  # its window is still open
            await n.idle()
            state = await call(url, "/users/maya/state")
            assert state.status == 200 and state.body
            n.side.rebuilds.revoked([MAYA])  # a rebalance: no longer owned, no owner known
            gone = await call(url, "/users/maya/state")
            assert gone.status == 503 and gone.body["owner"] is None

    asyncio.run(scenario())


def test_another_workers_user_is_forwarded_once(embedded: tuple[Settings, list[Fact | Tick]]) -> None:
    _, records = embedded

    async def scenario() -> None:
        owner = await owner_of_maya(records)
        async with served(owner) as owner_url:
            other = node("b", owners=lambda: {owner_url + "/": {FACTS: [MAYA], "uac.turns": [MAYA]}})
            async with served(other) as other_url:
                for path in ("/users/maya/state", "/users/maya/facts", "/users/maya/alerts"):
                    direct, forwarded = await call(owner_url, path), await call(other_url, path)
                    assert forwarded.status == direct.status == 200
                    assert forwarded.body == direct.body
                    assert forwarded.headers[FORWARDED_TO] == owner_url
                    assert forwarded.headers[SERVED_BY] == "a"
                counted = await call(other_url, "/users/maya/query", post=COUNT_BY_TYPE)
                assert counted.body == (await call(owner_url, "/users/maya/query", sql=COUNT_BY_TYPE)).body
                refused = await call(other_url, "/users/maya/query", sql=REFUSED[0])
                assert refused.status == 400 and "table functions" in refused.body["error"]
                slashed = neighbour("team/a b?")  # percent-encoded in the path, and so forwarded
                unknown = await call(other_url, f"/users/{urllib.parse.quote(slashed, safe='')}/state")
                assert unknown.status == 404 and repr(slashed) in unknown.body["error"]
                assert unknown.headers[FORWARDED_TO] == owner_url
                # a forwarded request that reaches a worker not owning the partition is not forwarded again
                again = await call(other_url, "/users/maya/state", headers={FORWARDED_BY: "x http://x"})
                assert again.status == 421 and again.body["owner"] == owner_url
        dead = f"http://127.0.0.1:{free_port()}"
        lost = node("c", owners=lambda: {dead: {FACTS: [MAYA]}})
        async with served(lost) as lost_url:
            answer = await call(lost_url, "/users/maya/alerts")
            assert answer.status == 503 and answer.headers["Retry-After"] == "2"
            assert answer.body["owner"] == dead and "unreachable" in answer.body["error"]

    asyncio.run(scenario())


# -- two real workers on the broker -----------------------------------------------------------------

def get(port: int, path: str, sql: str | None = None) -> Answer:
    query = f"?sql={urllib.parse.quote(sql)}" if sql is not None else ""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}{query}", timeout=15) as resp:
            return Answer(int(resp.status), dict(resp.headers), json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, dict(exc.headers), json.loads(exc.read()))


def poll(ports: tuple[int, ...], path: str, done: Callable[[list[Answer]], bool], deadline: float,
         what: str, tails: Callable[[], str]) -> list[Answer]:
    """GET ``path`` on every port until ``done(answers)`` or the deadline."""
    answers: list[Answer] = []
    while time.monotonic() < deadline:
        answers = [get(port, path) for port in ports]
        if done(answers):
            return answers
        time.sleep(0.5)
    raise AssertionError(f"{what}: last answers {[(a.status, a.body) for a in answers]}\n{tails()}")


@pytest.mark.kafka
def test_two_workers_answer_for_maya_directly_and_forwarded(kafka_broker: Any, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    env = {"UAC_WORKER_CHECKPOINT": "1"}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    with running_worker(bootstrap, tmp_path / "a", env) as (first, prefix):
        second = WorkerProcess(bootstrap, prefix, tmp_path / "b", env)
        try:
            second.wait_healthy(time.monotonic() + 60)
            ports = (first.port, second.port)

            def tails() -> str:
                return f"-- first:\n{first.tail(30)}\n-- second:\n{second.tail(30)}"

            # both in the group: the owner knows maya is nobody yet, the other forwards to it
            poll(ports, "/users/maya/state", lambda a: all(x.status == 404 for x in a),
                 time.monotonic() + 90, "the group never settled", tails)
            turns, tick = demo()
            asyncio.run(produce(bootstrap, prefix, turns, tick=tick))
            inputs = worker_inputs(bootstrap, prefix, turns, tick)
            with EmbeddedPipeline(Settings(data_dir=tmp_path / "expected")) as pipeline:
                pipeline.ingest(inputs)
                rows = pipeline.store.entities("maya")
                entities = {(r.entity_type, r.entity_id): r.attributes for r in rows}
                alerts = {(a.alert_id, a.status.value) for a in pipeline.store.alerts("maya")}
            assert entities and alerts

            def state_of(answer: Answer) -> dict[tuple[str, str], Any]:
                return {(e["entity_type"], e["entity_id"]): e["attributes"] for e in answer.body}

            states = poll(ports, "/users/maya/state",
                          lambda a: all(x.status == 200 and state_of(x) == entities for x in a),
                          time.monotonic() + 120, "the workers' state never matched", tails)
            check_owner_and_forwarder(states, ports)
            assert states[0].body == states[1].body
            found = poll(ports, "/users/maya/alerts", lambda a: all(
                x.status == 200 and {(y["alert_id"], y["status"]) for y in x.body} == alerts for x in a),
                time.monotonic() + 60, "the workers' alerts never matched", tails)
            assert found[0].body == found[1].body
            check_owner_and_forwarder(found, ports)

            by_type = Counter(t for t, _ in entities)
            for port in ports:
                counted = get(port, "/users/maya/query", COUNT_BY_TYPE)
                assert counted.status == 200, counted.body
                assert counted.body == {"columns": ["entity_type", "n"],
                                        "rows": [[t, n] for t, n in sorted(by_type.items())]}
                refused = get(port, "/users/maya/query", REFUSED[0])
                assert refused.status == 400 and "table functions" in refused.body["error"]
        finally:
            print(f"second worker exit code {second.stop()}; log tail:\n{second.tail(15)}")


def worker_inputs(bootstrap: str, prefix: str, turns: Any, tick: Any) -> list[Fact | Tick]:
    """The facts and ticks the workers wrote to ``uac.facts`` (in partition order)."""
    fact_ids = expected_fact_ids(turns)
    records = asyncio.run(consume(bootstrap, prefix + "uac.facts", lambda out: any(
        isinstance(v, Tick) and v.time == tick for *_, v in out) and {
        v.fact_id for *_, v in out if isinstance(v, Fact)} >= fact_ids, timeout=90))
    return [v for _, _, v in records if isinstance(v, Fact | Tick)]


def check_owner_and_forwarder(answers: list[Answer], ports: tuple[int, int]) -> None:
    """One worker answered itself, the other forwarded to it."""
    forwarded = [i for i, a in enumerate(answers) if FORWARDED_TO in a.headers]
    assert len(forwarded) == 1, [a.headers for a in answers]
    owner_port = ports[1 - forwarded[0]]
    assert answers[forwarded[0]].headers[FORWARDED_TO] == f"http://127.0.0.1:{owner_port}"
