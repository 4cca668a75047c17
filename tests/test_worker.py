"""The Kafka worker (faust app) as a real subprocess against the real broker: turns and observations
in, facts and dead letters out; the same facts as the extraction stage computes in-process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from uac.checkpointer.fold import fold
from uac.checkpointer.state import UserState
from uac.domains.facts import Fact, Tick, to_utc
from uac.extraction.extractor import Extractor
from uac.extraction.model import OFFLINE_MODEL, LiteLLMModel
from uac.extraction.turns import Turn, is_turn, parse_turn
from uac.extraction.windows import TurnWindows
from uac.settings import Settings
from uac.streams.avro import AvroCodec, DeadLetter
from uac.streams.topics import ensure_topics, partition_for, user_key
from uac.streams.worker import window_policy

DEMO = Path(__file__).resolve().parent.parent / "uac" / "examples" / "demo_conversation.jsonl"
PARTITIONS = 4
IDLE = 1.0


def demo() -> tuple[list[Turn], datetime]:
    """The demo conversation's turns and its final clock tick."""
    turns, ticks = [], []
    for n, line in enumerate(DEMO.read_text().splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            data = json.loads(line)
            if is_turn(data):
                turns.append(parse_turn(data, f"line {n}"))
            else:
                ticks.append(to_utc(data["tick"]))
    assert len(ticks) == 1
    return turns, ticks[0]


def extracted(turns: list[Turn]) -> list[tuple[list[Turn], list[Fact]]]:
    """What the extraction stage makes of these turns in-process: the worker's windows (closed by the
    policy, or at the end of a user's turns), each extracted with the user's state so far (the facts of
    the user's earlier windows, folded), as the embedded pipeline extracts them."""
    windows = TurnWindows(window_policy(Settings()))
    closed = [w for t in turns for w in windows.add(t)] + windows.flush()
    extractor = Extractor(LiteLLMModel(OFFLINE_MODEL))
    states: dict[str, UserState] = {}
    out = []
    for window in closed:
        facts = extractor.extract(window, states.get(window[0].user_id)).facts
        fold(facts, states)
        out.append((window, facts))
    return out


def expected_fact_ids(turns: list[Turn]) -> set[str]:
    return {f.fact_id for _, facts in extracted(turns) for f in facts}


def without_offset(key: bytes) -> bytes:
    """A tick key without the ``uac.turns`` offset a window's closing tick names (``USER/_tick/TIME``)."""
    from uac.streams.worker_extract import extracted_through

    return key.rsplit(b"/", 1)[0] if extracted_through(key) else key


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WorkerProcess:
    def __init__(self, bootstrap: str, prefix: str, tmp: Path,
                 extra_env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.log = tmp / "worker.log"
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "UAC_DATA_DIR": str(tmp / "data"),
               **(extra_env or {})}
        env.pop("UAC_MODEL", None)
        self._out = open(self.log, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from uac.cli_worker import worker; worker()",
             "--bootstrap", bootstrap, "--partitions", str(PARTITIONS), "--prefix", prefix,
             "--port", str(self.port), "--worker-id", "t1", "--idle-timeout", str(IDLE)],
            stdout=self._out, stderr=subprocess.STDOUT, env=env)

    def tail(self, lines: int = 60) -> str:
        if not self._out.closed:
            self._out.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def get(self, path: str) -> tuple[int, bytes]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
            return int(resp.status), bytes(resp.read())

    def wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                status, _body = self.get("/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"worker not healthy in time:\n{self.tail()}")

    def stop(self) -> int:
        code = stop_process(self.proc)
        self._out.close()
        return code


def stop_process(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM (a clean stop), SIGKILL if it takes longer than 30 s; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return int(proc.returncode)


@pytest.fixture
def worker(kafka_broker: Any, tmp_path: Path) -> Iterator[tuple[WorkerProcess, str]]:
    with running_worker(kafka_broker.bootstrap, tmp_path) as started:
        yield started


@contextmanager
def running_worker(bootstrap: str, tmp_path: Path,
                   extra_env: dict[str, str] | None = None) -> Iterator[tuple[WorkerProcess, str]]:
    """A healthy worker subprocess on fresh topics (a unique prefix); stopped at the end."""
    prefix = f"w{uuid.uuid4().hex[:8]}-"
    asyncio.run(ensure_topics(bootstrap, partitions=PARTITIONS, prefix=prefix))
    proc = WorkerProcess(bootstrap, prefix, tmp_path, extra_env)
    started = time.monotonic()
    try:
        proc.wait_healthy(time.monotonic() + 60)
        print(f"worker healthy after {time.monotonic() - started:.1f} s")
        yield proc, prefix
    except BaseException:
        print(proc.tail(), file=sys.stderr)
        raise
    finally:
        code = proc.stop()
        print(f"worker exit code {code}; log tail:\n{proc.tail(15)}")


async def produce(bootstrap: str, prefix: str, turns: list[Turn], *,
                  raw: tuple[tuple[bytes, bytes], ...] = (), tick: datetime | None = None,
                  tick_user: str | None = None) -> None:
    from aiokafka import AIOKafkaProducer

    from uac.client import UacProducer

    if raw:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for key, value in raw:
                await producer.send_and_wait(prefix + "uac.turns", value, key=key,
                                             partition=partition_for(key.decode(), PARTITIONS))
        finally:
            await producer.stop()
    async with UacProducer(bootstrap, prefix=prefix) as client:
        for turn in turns:
            await client.send_turn(turn)
        if tick is not None:
            await client.send_tick(tick, user_id=tick_user or turns[0].user_id)


async def wait_committed(bootstrap: str, group: str, topic: str, partition: int, target: int,
                         timeout: float = 30) -> int | None:
    """The group's committed offset of topic[partition], polled until it reaches ``target``."""
    from uac.streams.worker import committed_offsets

    found = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = (await committed_offsets(bootstrap, group, topic)).get(partition)
        if found is not None and found >= target:
            break
        await asyncio.sleep(0.5)
    return found


async def consume(bootstrap: str, topic: str, done: Any, timeout: float) -> list[Any]:
    """Records of ``topic`` (decoded), from the beginning, until ``done(records)`` or the deadline."""
    from aiokafka import AIOKafkaConsumer

    codec = AvroCodec()
    base = topic.split("-", 1)[1]
    out: list[Any] = []
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not done(out):
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                out += [(r.key, r.partition, codec.decode(base, r.value)) for r in records]
    finally:
        await consumer.stop()
    return out


@pytest.mark.kafka
def test_worker_extracts_the_demo_conversation(worker: tuple[WorkerProcess, str], kafka_broker: Any) -> None:
    proc, prefix = worker
    bootstrap = kafka_broker.bootstrap
    turns, tick = demo()
    expected = expected_fact_ids(turns)
    assert len(expected) > 10
    started = time.monotonic()
    asyncio.run(produce(bootstrap, prefix, turns, tick=tick))

    def facts_of(records: list[Any]) -> set[str]:
        return {v.fact_id for _, _, v in records if isinstance(v, Fact)}

    records = asyncio.run(consume(bootstrap, prefix + "uac.facts",
                                  lambda out: facts_of(out) >= expected and any(
                                      isinstance(v, Tick) and v.time == tick for *_, v in out),
                                  timeout=60))
    elapsed = time.monotonic() - started
    got = facts_of(records)
    assert got == expected, f"missing {expected - got}, extra {got - expected}\n{proc.tail()}"
    print(f"{len(turns)} turns -> {len(got)} facts in {elapsed:.1f} s")
    part = partition_for("maya", PARTITIONS)
    for key, partition, value in records:
        assert partition == part
        assert key.startswith(user_key("maya") + b"/")
        if isinstance(value, Fact):
            assert key == user_key("maya") + b"/" + value.fact_id.encode()
    ticks = {v.time for _, _, v in records if isinstance(v, Tick)}
    assert max(t.timestamp for t in turns) in ticks  # a tick at each window's last turn
    assert tick in ticks  # the observation tick, passed on

    committed = asyncio.run(wait_committed(bootstrap, f"{prefix}uac", prefix + "uac.turns", part, len(turns)))
    assert committed == len(turns), proc.tail()  # every turn's window is out: all committed

    status, body = proc.get("/metrics")
    assert status == 200
    text = body.decode()
    assert f"uac_facts_appended_total {float(len(got))}" in text
    assert 'uac_records_in_total{step_id="extract.turns"} ' + f"{float(len(turns))}" in text
    assert "uac_model_calls_total" in text
    status, body = proc.get("/health")
    assert status == 200 and json.loads(body)["status"] == "ok"


@pytest.mark.kafka
def test_poison_turn_goes_to_the_dlq_and_processing_continues(
        worker: tuple[WorkerProcess, str], kafka_broker: Any) -> None:
    proc, prefix = worker
    bootstrap = kafka_broker.bootstrap
    good = parse_turn({"user": "ana", "conversation": "c", "turn_id": "t1", "role": "user",
                       "text": "I'm allergic to penicillin.", "timestamp": "2025-01-15T09:30:00Z"}, "t")
    expected = expected_fact_ids([good])
    assert expected
    asyncio.run(produce(bootstrap, prefix, [good], raw=((user_key("ana"), b"not avro"),)))

    letters = asyncio.run(consume(bootstrap, prefix + "uac.dlq", lambda out: len(out) >= 1, timeout=60))
    assert len(letters) == 1, proc.tail()
    key, partition, letter = letters[0]
    assert isinstance(letter, DeadLetter)
    assert letter.step_id == "worker.decode"
    assert letter.source_topic == prefix + "uac.turns"
    assert letter.source_partition == partition_for("ana", PARTITIONS) == partition
    assert letter.source_offset == 0
    assert letter.payload == b"not avro"
    assert "magic byte" in letter.reason or "Avro" in letter.reason
    assert key == user_key("ana")

    records = asyncio.run(consume(bootstrap, prefix + "uac.facts",
                                  lambda out: {v.fact_id for *_, v in out if isinstance(v, Fact)} >= expected,
                                  timeout=60))
    assert {v.fact_id for *_, v in records if isinstance(v, Fact)} == expected, proc.tail()
    _status, body = proc.get("/metrics")
    assert 'uac_rejects_total{step_id="worker.decode"} 1.0' in body.decode()


# -- the agent alone (no broker): acks only after the outputs are written -----------------------------

class FakeOut:
    """A ``send`` that records what was sent and resolves each send when told to."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, Any, int]] = []
        self.futures: list[asyncio.Future[None]] = []
        self.codec = AvroCodec()

    async def __call__(self, topic: str, key: bytes | None, value: bytes, partition: int) -> Any:
        base = topic.split("-", 1)[1] if "-" in topic.split(".")[0] else topic
        self.sent.append((topic, key, self.codec.decode(base, value), partition))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut

    def resolve(self, user: str | None = None) -> None:
        """The broker acknowledges what was sent (or only the records under ``user``'s key)."""
        for (_, key, _, _), fut in zip(self.sent, self.futures, strict=True):
            if not fut.done() and (user is None or (key or b"").startswith(user_key(user) + b"/")):
                fut.set_result(None)


def _turn(tid: str, session: str, text: str, minute: int, user: str = "ana") -> Turn:
    return parse_turn({"user": user, "conversation": "c", "session": session, "turn_id": tid, "role": "user",
                       "text": text, "timestamp": f"2025-01-15T09:{minute:02d}:00Z"}, tid)


def test_agent_acks_turns_only_after_their_window_is_written() -> None:
    from uac.streams.worker_extract import ExtractionAgent, Source

    async def scenario() -> None:
        out, now, acked = FakeOut(), [0.0], []
        agent = ExtractionAgent(Extractor(LiteLLMModel(OFFLINE_MODEL)), out, partitions=PARTITIONS,
                                prefix="p-", idle_timeout=2.0, clock=lambda: now[0], offload=False)
        codec = AvroCodec()
        turns = [_turn("t1", "s1", "I'm allergic to penicillin.", 0),
                 _turn("t2", "s1", "I spent $12 on lunch at Joe's.", 1),
                 _turn("t3", "s2", "I'm allergic to peanuts.", 30)]

        async def feed(i: int) -> None:
            value = codec.encode("uac.turns", turns[i])
            await agent.on_turn(Source("p-uac.turns", 1, i, user_key("ana")), value, lambda: acked.append(i))

        await feed(0)
        await feed(1)
        assert out.sent == [] and acked == [] and agent.pending == 2
        task = asyncio.ensure_future(feed(2))  # closes the s1 window: its outputs are sent ...
        await until(lambda: bool(out.sent))
        assert acked == []  # ... but not acknowledged by the broker yet: no ack
        out.resolve()
        await task
        assert acked == [0, 1] and agent.pending == 1
        assert {f.fact_id for _, _, f, _ in out.sent if isinstance(f, Fact)} == expected_fact_ids(turns[:2])
        assert all(t == "p-uac.facts" and p == partition_for("ana", PARTITIONS) for t, _, _, p in out.sent)

        now[0] = 1.0
        assert await agent.close_idle() == 0 and acked == [0, 1]
        now[0] = 2.5
        before = len(out.sent)
        closing = asyncio.ensure_future(agent.close_idle())
        await until(lambda: len(out.sent) > before)
        assert acked == [0, 1]
        out.resolve()
        assert await closing == 1
        assert acked == [0, 1, 2] and agent.pending == 0

        await feed(0)  # a rebalance drops open windows without acking (the turns are read again)
        await agent.reset()
        assert agent.pending == 0 and acked == [0, 1, 2]

        bad: list[int] = []
        sent = len(out.sent)
        poison = asyncio.ensure_future(agent.on_observation(
            Source("p-uac.observations", 3, 7, user_key("ana")), b"\x00\x00\x00\x00\x01junk",
            lambda: bad.append(7)))
        await until(lambda: len(out.sent) > sent)
        out.resolve()
        await poison
        assert bad == [7]
        topic, key, letter, _ = out.sent[sent]
        assert topic == "p-uac.dlq" and key == user_key("ana") and isinstance(letter, DeadLetter)
        assert (letter.source_topic, letter.source_partition, letter.source_offset) == (
            "p-uac.observations", 3, 7)
        assert "unknown schema id 1" in letter.reason

    asyncio.run(scenario())


def test_agent_runs_users_windows_at_once_and_each_users_in_order() -> None:
    """Two users of one partition: their windows are in flight at once (and acknowledged in the order
    the broker acknowledges them), while a user's next window waits for the previous one; at the bound
    the consumer waits; a reset waits for the window being written and gives up the one behind it."""
    from uac.streams.worker_extract import ExtractionAgent, Source

    async def scenario() -> None:
        out, acked = FakeOut(), []
        agent = ExtractionAgent(Extractor(LiteLLMModel(OFFLINE_MODEL)), out, partitions=PARTITIONS,
                                prefix="p-", offload=False, max_in_flight=3)
        part = partition_for("ana", PARTITIONS)
        assert partition_for("cy", PARTITIONS) == part
        agent.assign([part])
        codec = AvroCodec()
        ana = [_turn("a1", "s1", "I'm allergic to penicillin.", 0),
               _turn("a2", "s2", "I spent $12 on lunch at Joe's.", 10),
               _turn("a3", "s3", "I'm allergic to peanuts.", 20),
               _turn("a4", "s4", "I spent $30 on dinner at Lupa.", 30),
               _turn("a5", "s5", "I'm allergic to latex.", 40)]
        cy = [_turn("c1", "s1", "I'm allergic to shellfish.", 1, "cy"),
              _turn("c2", "s2", "I spent $5 on coffee at Joe's.", 11, "cy")]
        offsets = {t.turn_id: n for n, t in enumerate(ana[:3] + cy + ana[3:])}

        def feed(turn: Turn) -> asyncio.Future[None]:
            n = offsets[turn.turn_id]
            return asyncio.ensure_future(agent.on_turn(
                Source("p-uac.turns", part, n, user_key(turn.user_id)), codec.encode("uac.turns", turn),
                lambda: acked.append(n)))

        def records(user: str) -> list[Any]:
            return [v for _, k, v, _ in out.sent if (k or b"").startswith(user_key(user) + b"/")]

        def in_flight() -> float | None:
            return agent.metrics.registry.get_sample_value("uac_worker_windows_in_flight")

        for turn in ana[:3]:  # closes ana's s1 window, then her s2 window
            await feed(turn)
        await settle()
        first = records("ana")
        assert first and isinstance(first[-1], Tick) and acked == []  # s1 out, not acknowledged yet
        assert in_flight() == 2  # her s2 window waits for s1: nothing of it sent
        await feed(cy[0])
        at_bound = feed(cy[1])  # closes cy's s1 window: written at once, while ana's is in flight
        await settle()
        assert isinstance(records("cy")[-1], Tick) and records("ana") == first and in_flight() == 3
        assert not at_bound.done()  # three windows in flight: the consumer waits
        out.resolve("cy")
        await at_bound
        assert acked == [offsets["c1"]]  # acknowledged out of order: ana's are still unacknowledged
        assert records("ana") == first
        out.resolve("ana")  # her s1 window is acknowledged: then her s2 window is extracted
        await settle()
        assert acked == [offsets["c1"], offsets["a1"]] and len(records("ana")) > len(first)
        out.resolve()
        await agent.drain()
        assert acked == [offsets["c1"], offsets["a1"], offsets["a2"]] and in_flight() == 0
        got = {f.fact_id for f in records("ana") if isinstance(f, Fact)}
        assert got == expected_fact_ids(ana[:2])
        kinds, n = [type(r).__name__ for r in records("ana")], len(first)  # each window: facts, then its tick
        assert kinds == ["Fact"] * (n - 1) + ["Tick"] + ["Fact"] * (len(kinds) - n - 1) + ["Tick"]

        for turn in ana[3:]:  # closes her s3 window (sent), then her s4 window (behind it)
            await feed(turn)
        await settle()
        sent = len(out.sent)
        resetting = asyncio.ensure_future(agent.reset([part]))
        await settle()
        assert not resetting.done()  # waits for the s3 window the broker has not acknowledged
        out.resolve()
        await resetting
        assert acked[-1] == offsets["a3"] and offsets["a4"] not in acked and len(out.sent) == sent
        assert agent.pending == 0 and in_flight() == 0

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_failed_window_is_not_acknowledged_and_its_error_is_raised() -> None:
    """The broker refuses a window's records: its turns and the user's later window stay unacknowledged
    (read again after the restart), and the next turn raises the error, as on_turn itself did."""
    from uac.streams.worker_extract import ExtractionAgent, Source

    async def scenario() -> None:
        out, acked = FakeOut(), []
        agent = ExtractionAgent(Extractor(LiteLLMModel(OFFLINE_MODEL)), out, partitions=PARTITIONS,
                                prefix="p-", offload=False)
        agent.assign([partition_for("ana", PARTITIONS)])
        codec = AvroCodec()
        turns = [_turn("t1", "s1", "I'm allergic to penicillin.", 0),
                 _turn("t2", "s2", "I'm allergic to peanuts.", 10),
                 _turn("t3", "s3", "I spent $12 on lunch at Joe's.", 20)]

        async def feed(i: int) -> None:
            source = Source("p-uac.turns", partition_for("ana", PARTITIONS), i, user_key("ana"))
            await agent.on_turn(source, codec.encode("uac.turns", turns[i]), lambda: acked.append(i))

        for i in range(3):
            await feed(i)
        await settle()
        sent = len(out.sent)
        out.futures[0].set_exception(RuntimeError("broker down"))
        out.resolve()
        await agent.drain()
        assert acked == [] and len(out.sent) == sent  # the s2 window gave up: never extracted
        with pytest.raises(RuntimeError, match="broker down"):
            await feed(0)

    asyncio.run(asyncio.wait_for(scenario(), 30))


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Let the event loop run until ``condition()`` holds (a failure after ``timeout`` seconds)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.001)


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)
