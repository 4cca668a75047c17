"""The Kafka worker under failure, as real subprocesses against the real broker: SIGKILLed and restarted
mid-run, one of two workers stopped, the broker restarted. Each run must end with exactly the facts an
uncrashed in-process extraction gives (duplicates only as identical records)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.test_worker import demo, extracted, free_port, stop_process, without_offset
from uac.domains.facts import Tick
from uac.extraction.locomo import locomo_turns
from uac.extraction.turns import Turn
from uac.streams.avro import AvroCodec
from uac.streams.topics import ensure_topics, fact_key
from uac.streams.worker_extract import tick_key

PARTITIONS = 4
IDLE = 3.0
"""Generous: every turn is produced well before its user's window could idle out, so the windows are
the policy's windows over all of a user's turns (what the in-process computation gives)."""
WORKER_ENV = {"UAC_WORKER_SESSION_TIMEOUT": "8"}
"""`uac worker --session-timeout`: a SIGKILLed member stays in the group until its session times
out (faust's default: 60 s), and a restarted worker's join waits for that."""


# -- inputs and what they should give ---------------------------------------------------------------

def copies(turns: list[Turn], n: int, tag: str) -> list[Turn]:
    """``n`` distinct copies of ``turns`` (users and turn ids suffixed), each in the original order."""
    return [replace(t, user_id=f"{t.user_id}-{tag}{c}", turn_id=f"{t.turn_id}-{tag}{c}")
            for c in range(n) for t in turns]


def locomo_all(locomo_dir: Path) -> list[Turn]:
    out: list[Turn] = []
    for path in sorted(locomo_dir.glob("*.json")):
        out += locomo_turns(json.loads(path.read_text()), path.stem)
    return out


@dataclass
class Expected:
    """The uncrashed computation: fact records and tick keys on ``uac.facts``."""

    facts: dict[bytes, str] = field(default_factory=dict)  # key -> fact id
    ticks: set[bytes] = field(default_factory=set)

    @property
    def records(self) -> int:
        return len(self.facts) + len(self.ticks)


def expected_outputs(turns: list[Turn]) -> Expected:
    """What the worker produces from these turns when every window closes by the policy or at the end
    of the user's turns (:func:`tests.test_worker.extracted`: each window with the user's state)."""
    out = Expected()
    for window, facts in extracted(turns):
        for fact in facts:
            out.facts[fact_key(fact.user_id, fact.fact_id)] = fact.fact_id
        out.ticks.add(tick_key(window[0].user_id, Tick(max(t.timestamp for t in window))))
    return out


class Background:
    """``fn()`` in a thread (the in-process computation, while the worker runs in its process)."""

    def __init__(self, fn: Callable[[], Expected]) -> None:
        self._result: list[Expected] = []
        self._error: list[BaseException] = []

        def run() -> None:
            try:
                self._result.append(fn())
            except BaseException as exc:  # re-raised in result()
                self._error.append(exc)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self, timeout: float = 180) -> Expected:
        self._thread.join(timeout)
        if self._error:
            raise self._error[0]
        assert self._result, "the in-process computation did not finish in time"
        return self._result[0]


# -- the worker as a subprocess ---------------------------------------------------------------------

class Worker:
    """``uac worker`` in a subprocess; each start appends to the same log."""

    def __init__(self, bootstrap: str, prefix: str, tmp: Path, worker_id: str = "r1") -> None:
        self.bootstrap, self.prefix, self.worker_id = bootstrap, prefix, worker_id
        self.port = free_port()
        self.log = tmp / f"worker-{worker_id}.log"
        self.env = {**os.environ, **WORKER_ENV, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    "UAC_DATA_DIR": str(tmp / "data")}
        self.env.pop("UAC_MODEL", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Worker:
        assert self.proc is None or self.proc.poll() is not None
        self.starts += 1
        with open(self.log, "ab") as out:
            out.write(f"==== start {self.starts} ====\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from uac.cli_worker import worker; worker()",
                 "--bootstrap", self.bootstrap, "--partitions", str(PARTITIONS), "--prefix", self.prefix,
                 "--port", str(self.port), "--worker-id", self.worker_id, "--idle-timeout", str(IDLE)],
                stdout=out, stderr=subprocess.STDOUT, env=self.env)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
            return bytes(resp.read())

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if json.loads(self.get("/health"))["status"] == "ok":
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"worker {self.worker_id} not healthy in time:\n{self.tail()}")

    def metric(self, name: str) -> float:
        """The sum of the samples of ``name`` (any labels) on /metrics."""
        total = 0.0
        for line in self.get("/metrics").decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"worker {self.worker_id} exited with {self.proc.returncode}:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no commit, no leaving the group."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> int | None:
        """SIGTERM (a clean stop), SIGKILL if it takes too long; the exit code."""
        return None if self.proc is None else stop_process(self.proc)


@pytest.fixture
def prefix(kafka_broker: Any) -> str:
    name = f"r{uuid.uuid4().hex[:8]}-"
    asyncio.run(ensure_topics(kafka_broker.bootstrap, partitions=PARTITIONS, prefix=name))
    return name


@pytest.fixture
def workers(kafka_broker: Any, prefix: str, tmp_path: Path) -> Iterator[Callable[[str], Worker]]:
    """``make(worker_id)`` a (not yet started) worker; every one is stopped at the end, and its log
    tail printed if the test failed."""
    made: list[Worker] = []

    def make(worker_id: str) -> Worker:
        made.append(Worker(kafka_broker.bootstrap, prefix, tmp_path, worker_id))
        return made[-1]

    failed = True
    try:
        yield make
        failed = False
    finally:
        for w in made:
            code = w.stop()
            if failed:
                print(f"--- worker {w.worker_id} (exit {code}), log tail:\n{w.tail(80)}", file=sys.stderr)


# -- the broker side ---------------------------------------------------------------------------------

async def _produce(bootstrap: str, prefix: str, turns: list[Turn]) -> None:
    """Every turn, each user's in order, users concurrently (so partitions interleave users)."""
    from uac.client import UacProducer

    by_user: dict[str, list[Turn]] = defaultdict(list)
    for t in turns:
        by_user[t.user_id].append(t)
    async with UacProducer(bootstrap, prefix=prefix) as client:
        async def one(user_turns: list[Turn]) -> None:
            for t in user_turns:
                await client.send_turn(t)

        await asyncio.gather(*(one(ts) for ts in by_user.values()))


def produce(bootstrap: str, prefix: str, turns: list[Turn]) -> None:
    asyncio.run(_produce(bootstrap, prefix, turns))


async def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = await consumer.end_offsets(parts)
        return {tp.partition: int(off) for tp, off in ends.items()}
    finally:
        await consumer.stop()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    return asyncio.run(_end_offsets(bootstrap, topic))


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from uac.streams.worker import committed_offsets

    return asyncio.run(committed_offsets(bootstrap, group, topic))


async def _read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every record of ``topic`` up to its current end offsets: (key, value bytes)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    out: list[tuple[bytes, bytes]] = []
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        await consumer.seek_to_beginning(*parts)
        deadline = time.monotonic() + 60
        while [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "could not read the facts topic to its end"
            batch = await consumer.getmany(*parts, timeout_ms=500, max_records=5000)
            for records in batch.values():
                out += [(r.key, r.value) for r in records]
    finally:
        await consumer.stop()
    return out


def read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    return asyncio.run(_read_all(bootstrap, topic))


def wait_facts(bootstrap: str, prefix: str, target: int, alive: list[Worker], timeout: float) -> int:
    """Poll the facts topic's end offsets (facts and ticks) until they hold ``target`` records."""
    deadline = time.monotonic() + timeout
    while True:
        total = sum(end_offsets(bootstrap, prefix + "uac.facts").values())
        if total >= target:
            return total
        for w in alive:
            w.check_alive()
        assert time.monotonic() < deadline, f"only {total} of {target} records on uac.facts in time"
        time.sleep(0.3)


def wait_done(bootstrap: str, prefix: str, alive: list[Worker], timeout: float) -> dict[int, int]:
    """Poll until the group's committed offsets on uac.turns reach the end offsets (every turn's window
    is out and acknowledged) and no new record arrived on uac.facts for an idle timeout."""
    deadline = time.monotonic() + timeout
    turns, facts, group = prefix + "uac.turns", prefix + "uac.facts", prefix + "uac"
    ends = end_offsets(bootstrap, turns)
    last, since = -1, time.monotonic()
    while True:
        for w in alive:
            w.check_alive()
        total = sum(end_offsets(bootstrap, facts).values())
        if total != last:
            last, since = total, time.monotonic()
        done = committed(bootstrap, group, turns)
        if all(done.get(p, -1) >= end for p, end in ends.items()) and time.monotonic() - since >= IDLE:
            return done
        assert time.monotonic() < deadline, (
            f"not done in time: committed {done}, ends {ends}, {total} records on uac.facts")
        time.sleep(0.5)


def check_facts(bootstrap: str, prefix: str, expected: Expected) -> tuple[int, int]:
    """uac.facts holds exactly the expected facts (duplicates only as identical records) and every
    expected tick; the number of duplicate records and of ticks not expected."""
    records = read_all(bootstrap, prefix + "uac.facts")
    values: dict[bytes, set[bytes]] = defaultdict(set)
    for key, value in records:
        values[key].add(value)
    differing = {k: len(v) for k, v in values.items() if len(v) > 1 and b"/_tick/" not in k}
    assert not differing, f"keys with differing values: {list(differing.items())[:5]}"
    codec = AvroCodec()
    got = {k: codec.decode("uac.facts", next(iter(v))).fact_id
           for k, v in values.items() if b"/_tick/" not in k}
    missing = expected.facts.keys() - got.keys()
    extra = got.keys() - expected.facts.keys()
    assert not missing and not extra, (f"{len(missing)} missing, e.g. {sorted(missing)[:3]}; "
                                       f"{len(extra)} extra, e.g. {sorted(extra)[:3]}")
    assert got == expected.facts  # each key holds its fact (key and fact id agree)
    ticks = {without_offset(k) for k in values if b"/_tick/" in k}
    assert expected.ticks <= ticks, f"missing ticks: {sorted(expected.ticks - ticks)[:3]}"
    return len(records) - len(values), len(ticks - expected.ticks)


# -- the tests ---------------------------------------------------------------------------------------

@pytest.mark.kafka
@pytest.mark.slow
def test_killed_worker_restarts_without_losing_or_changing_facts(
        kafka_broker: Any, prefix: str, workers: Callable[[str], Worker], locomo_dir: Path,
        tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    demo_turns, _tick = demo()
    turns = copies(locomo_all(locomo_dir), 3, "k") + copies(demo_turns, 100, "k")
    assert len(turns) >= 20_000
    began = time.monotonic()
    produce(bootstrap, prefix, turns)  # all before the worker starts: windows do not hang on timing
    print(f"produced {len(turns)} turns in {time.monotonic() - began:.1f} s")
    # the kill points need the expected count: one copy each gives it (copies differ in ids only)
    estimate = (expected_outputs(locomo_all(locomo_dir)).records * 3
                + expected_outputs(demo_turns).records * 100)
    expected_job = Background(lambda: expected_outputs(turns))  # the exact set, while the worker runs

    worker = workers("k1")
    worker.env["UAC_WORKER_CHECKPOINT"] = "1"  # the checkpoint agent too: killed and restored with it
    worker.start()
    started = time.monotonic()
    for share in (0.2, 0.5, 0.8):
        at = wait_facts(bootstrap, prefix, int(estimate * share), [worker], timeout=120)
        worker.kill()
        print(f"SIGKILL at {at} of ~{estimate} records ({time.monotonic() - started:.1f} s)")
        worker.start()
    done = wait_done(bootstrap, prefix, [worker], timeout=150)
    print(f"done after {time.monotonic() - started:.1f} s: committed {done}")
    expected = expected_job.result()
    assert expected.records == estimate
    duplicates, extra_ticks = check_facts(bootstrap, prefix, expected)
    entities = check_state(bootstrap, prefix, worker, tmp_path)
    print(f"{len(turns)} turns -> {len(expected.facts)} facts, {len(expected.ticks)} ticks; "
          f"{duplicates} duplicate records, {extra_ticks} extra ticks; {entities} live entities "
          f"on uac.state as without the crashes; total {time.monotonic() - began:.1f} s")


def check_state(bootstrap: str, prefix: str, worker: Worker, tmp: Path) -> int:
    """Once every fact is folded (the group's committed offsets of uac.facts at their ends), the live
    entities on ``uac.state`` equal what the embedded pipeline folds from the same facts, and no
    alert was raised twice while open; the number of live entities."""
    from uac.checkpointer.records import EntityRow
    from uac.domains.facts import Fact
    from uac.executor.alerts import AlertEvent
    from uac.settings import Settings
    from uac.streams.embedded import EmbeddedPipeline

    facts_topic, deadline = prefix + "uac.facts", time.monotonic() + 120
    while not all(committed(bootstrap, prefix + "uac", facts_topic).get(p, -1) >= end
                  for p, end in end_offsets(bootstrap, facts_topic).items() if end > 0):
        worker.check_alive()
        assert time.monotonic() < deadline, "the checkpoint agent did not fold every fact in time"
        time.sleep(0.5)
    codec = AvroCodec()
    facts = {f.fact_id: f for _, v in read_all(bootstrap, facts_topic)
             if isinstance(f := codec.decode("uac.facts", v), Fact)}
    with EmbeddedPipeline(Settings(data_dir=tmp / "embedded")) as pipeline:
        pipeline.ingest(sorted(facts.values(), key=lambda f: (f.observed_time, f.fact_id)))
        want = {(u, r.entity_type, r.entity_id): r.attributes
                for u in pipeline.store.users() for r in pipeline.store.entities(u)}
    latest: dict[bytes, EntityRow] = {}
    for key, value in read_all(bootstrap, prefix + "uac.state"):
        latest[key] = codec.decode_entity(key, value)
    got = {(r.user_id, r.entity_type, r.entity_id): r.attributes for r in latest.values() if r.exists}
    assert got == want, f"{len(got.keys() ^ want.keys())} entities differ in presence"
    last: dict[str, AlertEvent] = {}
    for _, value in read_all(bootstrap, prefix + "uac.alerts"):
        event = codec.decode_as("uac.alerts", value, AlertEvent)
        before = last.get(event.alert.alert_id)
        assert before is None or before.kind is not event.kind or before == event, (before, event)
        last[event.alert.alert_id] = event
    return len(got)


@pytest.mark.kafka
def test_second_worker_takes_over_when_one_stops(
        kafka_broker: Any, prefix: str, workers: Callable[[str], Worker], locomo_dir: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    demo_turns, _tick = demo()
    locomo = locomo_all(locomo_dir)
    turns = copies(locomo[:2000], 1, "a") + copies(demo_turns, 40, "a")
    expected_job = Background(lambda: expected_outputs(turns))
    one, two = workers("a1").start(), workers("a2").start()
    one.wait_healthy()
    two.wait_healthy()
    began = time.monotonic()
    produce(bootstrap, prefix, turns)
    print(f"produced {len(turns)} turns in {time.monotonic() - began:.1f} s")
    expected = expected_job.result()
    wait_facts(bootstrap, prefix, expected.records // 3, [one, two], timeout=90)
    in_two = two.metric("uac_records_in_total")
    assert in_two > 0, "the second worker got no partition"
    assert two.stop() == 0, two.tail()
    print(f"stopped worker a2 after {in_two:.0f} records in ({time.monotonic() - began:.1f} s)")
    wait_done(bootstrap, prefix, [one], timeout=120)
    duplicates, extra_ticks = check_facts(bootstrap, prefix, expected)
    print(f"{len(turns)} turns -> {len(expected.facts)} facts; {duplicates} duplicate records, "
          f"{extra_ticks} extra ticks; a1 read {one.metric('uac_records_in_total'):.0f} records; "
          f"{time.monotonic() - began:.1f} s")


@pytest.mark.kafka
def test_worker_survives_a_broker_restart(
        kafka_broker: Any, prefix: str, workers: Callable[[str], Worker], locomo_dir: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    demo_turns, _tick = demo()
    locomo = locomo_all(locomo_dir)
    before = copies(locomo[:1500], 1, "b") + copies(demo_turns, 30, "b")
    after = copies(locomo[1500:3000], 1, "c") + copies(demo_turns, 30, "c")  # other users
    expected_job = Background(lambda: expected_outputs(before + after))
    worker = workers("b1").start()
    worker.wait_healthy()
    began = time.monotonic()
    produce(bootstrap, prefix, before)
    # every turn of the first part is in the worker (so no window hangs on the broker's downtime),
    # and its windows are still being extracted and written when the broker goes away
    deadline = time.monotonic() + 60
    while worker.metric("uac_records_in_total") < len(before):
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.2)
    at = sum(end_offsets(bootstrap, prefix + "uac.facts").values())
    kafka_broker.restart()
    print(f"broker restarted with {at} records on uac.facts ({time.monotonic() - began:.1f} s)")
    restarts = 0
    if not worker.alive:  # see the report: the worker is expected to survive; restarted if not
        restarts += 1
        print(f"FINDING: the worker exited ({worker.proc.returncode if worker.proc else None}) over the "
              f"broker restart; restarting it:\n{worker.tail(30)}")
        worker.start()
    produce(bootstrap, prefix, after)
    done = wait_done(bootstrap, prefix, [worker], timeout=120)
    expected = expected_job.result()
    duplicates, extra_ticks = check_facts(bootstrap, prefix, expected)
    print(f"{len(before) + len(after)} turns -> {len(expected.facts)} facts; committed {done}; "
          f"{duplicates} duplicate records, {extra_ticks} extra ticks; worker restarts {restarts}; "
          f"{time.monotonic() - began:.1f} s")
