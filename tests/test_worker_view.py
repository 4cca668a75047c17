"""The worker's view of what memory holds (write-through + rebuild on assignment) and the extraction agent
using it, without a broker: the agent extracts each window with the user's state, as the embedded
pipeline does, also after it read its partition back from ``uac.facts``."""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from collections.abc import AsyncGenerator, Collection
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from tests.test_worker import DEMO, PARTITIONS, demo, extracted
from uac.checkpointer.fold import fold
from uac.checkpointer.state import UserState
from uac.domains.facts import Fact, make_fact
from uac.extraction.extractor import Extractor
from uac.extraction.model import OFFLINE_MODEL, LiteLLMModel
from uac.extraction.turns import Turn
from uac.settings import Settings
from uac.streams.avro import AvroCodec
from uac.streams.embedded import EmbeddedPipeline
from uac.streams.topics import partition_for, user_key
from uac.streams.worker_extract import ExtractionAgent, Source
from uac.streams.worker_view import FactView, KeyedBatch

T0 = datetime(2025, 3, 4, 21, 0, tzinfo=UTC)

P = partition_for("maya", PARTITIONS)
FACTS = "p-uac.facts"


def snap(state: UserState | None) -> bytes:
    return (state or UserState("maya")).snapshot_bytes()


def embedded_facts(tmp: Path) -> dict[str, Fact]:
    """The facts the embedded pipeline extracts from the demo conversation."""
    with EmbeddedPipeline(Settings(data_dir=tmp)) as pipeline:
        pipeline.ingest_lines(DEMO.read_text().splitlines(), str(DEMO))
        return {r.fact_id: r for _, r in pipeline.log.read(0) if isinstance(r, Fact)}


class Broker:
    """Topics as lists of (key, value) per partition: ``send`` writes (acknowledged at once); ``read``
    reads ``uac.facts`` back as :func:`~uac.streams.worker_view.read_records` does (up to the end offsets
    at the call, three records a batch), once ``opened`` is set."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
        self.opened = asyncio.Event()
        self.opened.set()
        self.reads = 0
        self.codec = AvroCodec()
        self.turns: dict[tuple[int, str, str, str], int] = {}

    def turn_offset(self, partition: int, turn: Turn) -> int:
        """The ``uac.turns`` offset of ``turn`` (the same turn fed again: the same offset)."""
        at = (partition, turn.user_id, turn.conversation_id, turn.turn_id)
        return self.turns.setdefault(at, sum(1 for k in self.turns if k[0] == partition))

    async def send(self, topic: str, key: bytes | None, value: bytes | None, partition: int) -> Any:
        self.records[(topic, partition)].append((key, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def read(self, topic: str, partitions: Collection[int]) -> AsyncGenerator[KeyedBatch, None]:
        self.reads += 1
        ends = {p: len(self.records[(topic, p)]) for p in partitions}
        await self.opened.wait()
        for p in partitions:
            values = [(i, k, v) for i, (k, v) in enumerate(self.records[(topic, p)][:ends[p]])]
            if not values:
                yield p, [], True
            for i in range(0, len(values), 3):
                yield p, values[i:i + 3], i + 3 >= len(values)

    def facts(self, topic: str = FACTS) -> list[Fact]:
        out = []
        for (name, _), records in sorted(self.records.items()):
            if name == topic:
                out += [f for _, v in records if v is not None and v[:1] == b"\x00" and isinstance(
                    f := self.codec.decode("uac.facts", v), Fact)]  # not the junk added below
        return out


class Driver:
    """An :class:`ExtractionAgent` fed turns as the worker feeds it (offline model, no thread)."""

    def __init__(self, broker: Broker, *, read: bool = False, model: LiteLLMModel | None = None) -> None:
        self.now: list[float] = [0.0]
        self.acked: list[str] = []
        self.broker = broker
        self.agent = ExtractionAgent(Extractor(model or LiteLLMModel(OFFLINE_MODEL)), broker.send,
                                     partitions=PARTITIONS, prefix="p-", idle_timeout=2.0,
                                     clock=lambda: self.now[0], offload=False,
                                     read=broker.read if read else None)
        self.codec = AvroCodec()

    async def feed(self, turns: list[Turn]) -> None:
        for turn in turns:
            value = self.codec.encode("uac.turns", turn)
            part = partition_for(turn.user_id, PARTITIONS)
            source = Source("p-uac.turns", part, self.broker.turn_offset(part, turn), user_key(turn.user_id))
            await self.agent.on_turn(source, value, functools.partial(self.acked.append, turn.turn_id))

    async def idle_out(self) -> int:
        self.now[0] += 10.0
        return await self.agent.close_idle()


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


def session(turns: list[Turn], *names: str) -> list[Turn]:
    return [t for t in turns if t.session_id in names]


# -- the view ------------------------------------------------------------------------------------------

def test_view_rebuilds_a_partition_folds_in_what_is_written_and_drops_it() -> None:
    turns, _ = demo()
    facts = [f for _, fs in extracted(turns) for f in fs]

    async def scenario() -> None:
        view = FactView(PARTITIONS)
        generation = view.assign(P)
        waiting = asyncio.ensure_future(view.wait(P))
        await settle()
        assert not waiting.done() and not view.ready(P)
        assert view.fold_in(facts[-1])  # written while the partition is read back
        half = len(facts) // 2
        assert view.rebuild(P, facts[:half], generation) == half
        assert view.rebuild(P, facts[half:], generation) == len(facts) - half  # one already in: no matter
        assert view.done(P, generation) and await waiting
        assert snap(view.state("maya")) == snap(fold(facts)["maya"])

        again = view.assign(P)  # assigned again: a stale rebuild changes nothing
        assert view.rebuild(P, facts, generation) == 0 and not view.done(P, generation)
        assert view.state("maya") is None and not view.ready(P) and view.current(P, again)
        waiting = asyncio.ensure_future(view.wait(P))
        await settle()
        view.drop(P)  # revoked: whoever waits learns it
        assert await waiting is False
        assert not view.fold_in(facts[0]) and view.state("maya") is None and not await view.wait(P)

    asyncio.run(scenario())


def test_a_window_read_again_gets_the_state_it_had_the_first_time() -> None:
    turns, _ = demo()
    windows = extracted(turns)
    late = make_fact(user_id="maya", entity_type="allergy", entity_id="latex",
                     attributes={"substance": "latex"}, valid_time="2025-12-01")  # an observation
    view = FactView(PARTITIONS)
    view.done(P, view.assign(P))
    assert view.fold_in(late)
    states: dict[str, UserState] = {"maya": fold([late])["maya"]}
    for window, facts in windows:  # the first time: the whole state
        assert snap(view.state_for(window)) == snap(states["maya"])
        for fact in facts:
            view.fold_in(fact)
        fold(facts, states)
    before: dict[str, UserState] = {"maya": fold([late])["maya"]}
    for window, facts in windows:  # read again (a crash): without its own and later extracted facts
        assert snap(view.state_for(window)) == snap(before["maya"])
        fold(facts, before)


# -- the agent -----------------------------------------------------------------------------------------

def test_agent_extracts_each_window_with_the_users_state_as_the_embedded_pipeline(tmp_path: Path) -> None:
    turns, _ = demo()
    expected = embedded_facts(tmp_path)
    correction = next(f for f in expected.values() if "s13-t1" in f.provenance)
    original = next(f for f in expected.values() if "s2-t1" in f.provenance and f.entity_type == "passport")
    assert correction.supersedes == (original.fact_id,) and correction.entity_id == original.entity_id
    without_state = Extractor(LiteLLMModel(OFFLINE_MODEL)).extract(session(turns, "s13"), None).facts
    assert correction.fact_id not in {f.fact_id for f in without_state}  # what the worker did before

    async def scenario() -> tuple[Broker, Driver]:
        broker = Broker()
        driver = Driver(broker)
        await driver.feed(turns)
        assert await driver.idle_out() == 1  # the last session
        return broker, driver

    broker, driver = asyncio.run(scenario())
    got = {f.fact_id: f for f in broker.facts()}
    assert got == expected  # ids and contents
    assert driver.acked == [t.turn_id for t in turns] and driver.agent.pending == 0


def test_agent_reads_its_partition_back_before_extracting(tmp_path: Path) -> None:
    """A new worker (agent) gets the partition a first one wrote sessions 1-12 to: the correction of
    session 13 waits for the read back (on a turn and on the idle timer) and then supersedes the
    original passport fact, as in the embedded pipeline; a revoke meanwhile drops the window."""
    turns, _ = demo()
    expected = embedded_facts(tmp_path)
    correction = next(f for f in expected.values() if "s13-t1" in f.provenance)
    first = [t for t in turns if int(t.session_id[1:]) <= 12]

    async def scenario() -> None:
        broker = Broker()
        one = Driver(broker)
        await one.feed(first)
        assert await one.idle_out() == 1
        broker.records[(FACTS, P)] += [(b"maya/x", None), (b"maya/y", b"not avro")]  # skipped
        written = len(broker.facts())

        # a turn closes the window: it waits for the read back
        two = Driver(broker, read=True)
        broker.opened.clear()
        two.agent.assign([P])
        await two.feed(session(turns, "s13"))
        feeding = asyncio.ensure_future(two.feed(session(turns, "s14")[:1]))
        await settle()
        assert not feeding.done() and len(broker.facts()) == written and two.acked == []
        broker.opened.set()
        await feeding
        assert correction in broker.facts()[written:]
        assert two.acked == [t.turn_id for t in session(turns, "s13")]

        # the idle timer closes the window: it waits too
        three = Driver(broker, read=True)
        broker.opened.clear()
        three.agent.assign([P])
        await three.feed(session(turns, "s13"))
        closing = asyncio.ensure_future(three.idle_out())
        await settle()
        assert not closing.done() and three.acked == []
        broker.opened.set()
        assert await closing == 1 and three.acked == two.acked

        # revoked while reading back: the waiting window is dropped, never acknowledged
        four = Driver(broker, read=True)
        broker.opened.clear()
        four.agent.assign([P])
        await four.feed(session(turns, "s13"))
        closing = asyncio.ensure_future(four.idle_out())
        await settle()
        sent = len(broker.facts())
        await four.agent.reset([P])
        assert await closing == 0 and four.acked == [] and four.agent.pending == 0
        await settle()
        assert len(broker.facts()) == sent and not four.agent._rebuilds  # the read back was cancelled
        broker.opened.set()

    asyncio.run(scenario())


def test_turns_read_again_are_not_extracted_again_so_a_model_answering_otherwise_changes_nothing(
        ) -> None:
    """A worker dies after a window's facts and closing tick are on ``uac.facts`` but before its turns'
    offsets are committed: the next owner reads the turns again. A hosted model need not answer the
    same twice (here it would say another reaction), so they must not go to it again: the tick names
    the last turn's offset, and turns up to it are acknowledged without a model call."""
    from uac.extraction.fake_server import FakeChatServer, Reply

    def allergy(reaction: str, turn: str) -> Reply:
        return Reply(orjson.dumps({"facts": [{
            "type": "allergy", "op": "assert", "turns": [turn],
            "attributes": {"substance": "penicillin", "reaction": reaction}}]}).decode())

    turns = [Turn("maya", "chat", "t1", "user", "I'm allergic to penicillin.", T0, "s1"),
             Turn("maya", "chat", "t2", "assistant", "Noted.", T0 + timedelta(minutes=1), "s1"),
             Turn("maya", "chat", "t3", "user", "It gives me hives.", T0 + timedelta(hours=9), "s2")]

    async def scenario(fake: FakeChatServer) -> tuple[Broker, Driver]:
        model = LiteLLMModel("openai/fake-model", api_base=fake.base_url, api_key="test-key")
        broker = Broker()
        one = Driver(broker, model=model)
        await one.feed(turns[:2])
        assert await one.idle_out() == 1 and one.acked == ["t1", "t2"]
        two = Driver(broker, read=True, model=model)  # the turns' offsets were not committed
        two.agent.assign([P])
        await two.feed(turns)
        assert await two.idle_out() == 1
        return broker, two

    with FakeChatServer([allergy("rash", "t1"), allergy("hives", "t3"), allergy("swelling", "t1")]) as fake:
        broker, two = asyncio.run(scenario(fake))
        asked = [orjson.loads(r["messages"][-1]["content"])["turns"] for r in fake.requests]
    assert [[t["id"] for t in window] for window in asked] == [["t1", "t2"], ["t3"]]
    assert two.acked == ["t1", "t2", "t3"] and two.agent.turns_skipped == 2
    assert sorted(f.attributes["reaction"] for f in broker.facts()) == ["hives", "rash"]
    ticks = [k for k, _ in broker.records[(FACTS, P)] if k and b"/_tick/" in k]
    assert [k.rsplit(b"/", 1)[1] for k in ticks] == [b"1", b"2"]  # the offsets of t2 and t3
