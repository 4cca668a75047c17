"""The Kafka worker end to end on a real broker, against a raw aiokafka passthrough as the ceiling.

A real single-node Kafka 4 (``uac.streams.testbroker.KafkaBroker``, the jars of ``make
broker-jars``) and, per repeat, fresh topics (a unique prefix, 8 partitions: the default) and ONE
``uac worker`` subprocess with the checkpoint agent on, the offline model, every other setting at
its default (idle timeout 2.0 s). Turns come from a seeded generator: many users; a session is 1-3
user statements the offline model reads (spending, dinners, purchases, trips, classes, budgets,
allergies, prescriptions; some small talk), each followed by the assistant's reply; session r of
every user falls on day r (fixed event times, no wall clock). ``UacProducer`` sends them, a user's
turns in order, 128 users at a time.

* Throughput: the consuming process is stopped (SIGSTOP) while every turn is sent and acknowledged,
  then let go (SIGCONT): a backlog of all N turns at once, timed from the release until every
  extraction window's closing tick is on ``uac.facts`` (all turns extracted, their facts
  acknowledged) AND a sentinel per partition (an observation and a tick sent only then, behind all
  those facts) has come out of the checkpoint agent on ``uac.state`` (every fact folded, its state
  published). Each user's last window closes on the idle timeout, so the time includes it once.
* Passthrough ceiling, in the same run, over the same turns, timed the same way (median of 3
  rounds): a subprocess consumes the turns topic, produces every record to another topic (acks=all,
  idempotent) and commits after each batch; until every record is on the output topic. Ratio
  pipeline/passthrough.
* Context, in the same repeat and timed the same way: TWO workers of one group over the same
  backlog (fresh topics; the scaling the shared partitions give, on this 2-core machine shared
  with the broker), and the embedded pipeline over the same turns in one process (``api.ingest_turns``:
  the same extraction, fold and rules without Kafka).
* Latency turn -> alert (after the throughput round, on the same worker, at a modest rate so that
  nothing queues): users whose penicillin allergy is already in state send a prescription of a
  penicillin-class drug, followed by the assistant's reply as in a chat; from just before the send
  to the raised ``drug_allergy`` alert reaching a consumer of ``uac.alerts``; p50 and p99. Target:
  the idle timeout (what closes the extraction window of a turn after which the user says nothing
  more) + 100 ms.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.config import Config
from benchmarks.harness import Figure, median, percentile, settle
from uac.extraction.turns import Turn
from uac.extraction.windows import TurnWindows
from uac.settings import Settings
from uac.streams.topics import partition_for, user_of_key

ROOT = Path(__file__).resolve().parent.parent
"""The checkout (the subprocesses run there, on its ``uac`` and ``benchmarks``)."""
PARTITIONS: int = Settings.model_fields["kafka_partitions"].default
WARM_START = datetime(2024, 11, 1, tzinfo=UTC)
DATA_START = datetime(2025, 1, 1, tzinfo=UTC)
LATENCY_START = datetime(2026, 6, 1, tzinfo=UTC)
IN_FLIGHT = 128
PASSES = 3
"""Timed passthrough rounds per repeat."""
REPLY = "Noted, I've saved that."

# -------------------------------------------------------------------------------------------- data

MERCHANTS = ("Lupa", "Sushi Zen", "Bistro 9", "Green Market", "Corner Deli", "Taqueria Sol")
FRIENDS = ("Sam", "Ana", "Priya", "Tom", "Lena", "Omar")
CITIES = ("Tokyo", "Lisbon", "Montreal", "Oslo", "Lima", "Seoul")
ACTIVITIES = ("pilates", "yoga", "spin", "pottery", "salsa")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
ITEMS = ("noise-cancelling headphones", "a coffee grinder", "running shoes", "a desk lamp")
SUBSTANCES = ("peanuts", "shellfish", "latex", "sulfa drugs", "cats")
DRUGS = ("ibuprofen", "metformin", "lisinopril", "cetirizine")
CONFLICTING = ("amoxicillin", "ampicillin", "augmentin", "dicloxacillin")


def statement(rng: random.Random, at: datetime) -> str:
    """One user statement the offline model turns into a fact (a few are small talk)."""
    later = at + timedelta(days=rng.randint(3, 40))
    month, day = later.strftime("%B"), later.day
    back = later + timedelta(days=rng.randint(3, 12))
    kind = rng.choices(range(9), (30, 12, 8, 8, 6, 5, 4, 4, 5))[0]
    return (
        f"I spent ${rng.randint(8, 140)} at {rng.choice(MERCHANTS)} on dinner tonight.",
        f"I'm having dinner with {rng.choice(FRIENDS)} at {rng.choice(MERCHANTS)} on {month} {day} "
        "from 6:30 to 8:30pm.",
        f"I bought {rng.choice(ITEMS)} for ${rng.randint(20, 400)} at SoundShop; I can return them "
        f"until {month} {day} and the warranty runs two years.",
        f"I booked a vacation to {rng.choice(CITIES)} from {month} {day} to {back:%B} {back.day} "
        f"for ${rng.randint(500, 3000):,}.",
        f"I have {rng.choice(ACTIVITIES)} class every {rng.choice(WEEKDAYS)} from 6 to 7pm.",
        f"Money resolution for this year: I want to keep dining out under ${rng.randint(2, 6)}00 a month.",
        f"I'm allergic to {rng.choice(SUBSTANCES)}.",
        f"Dr. Okafor prescribed me {rng.choice(DRUGS)} {rng.choice((100, 200, 500))} mg today.",
        "Thanks, that's all for now.",
    )[kind]


def session(user: str, n: int, at: datetime, texts: Sequence[str]) -> list[Turn]:
    """One session: each user statement followed by the assistant's reply, 20 s apart."""
    sid, out = f"s{n}", []
    for k, text in enumerate(texts):
        t = at + timedelta(seconds=40 * k)
        out += [Turn(user, f"{user}-chat", f"{sid}-t{2 * k + 1}", "user", text, t, sid),
                Turn(user, f"{user}-chat", f"{sid}-t{2 * k + 2}", "assistant", REPLY,
                     t + timedelta(seconds=20), sid)]
    return out


def workload(seed: int, tag: str, users: int, sessions: int, start: datetime) -> list[list[Turn]]:
    """Sessions in production order: round r is session r of every user (shuffled) on day r; a
    session holds 1-3 statements, each with its reply."""
    rng = random.Random(seed)
    names = [f"{tag}-u{i:05d}" for i in range(users)]
    step = timedelta(days=1) / users
    out = []
    for r in range(sessions):
        order = names[:]
        rng.shuffle(order)
        for j, user in enumerate(order):
            at = start + timedelta(days=r) + j * step
            texts = [statement(rng, at) for _ in range(rng.randint(1, 3))]
            out.append(session(user, r, at, texts))
    return out


def windows_of(sessions: Sequence[Sequence[Turn]]) -> int:
    """How many extraction windows the worker cuts (the default policy; idle only flushes)."""
    from uac.streams.worker import window_policy

    batcher = TurnWindows(window_policy(Settings()))
    closed = sum(len(batcher.add(t)) for s in sessions for t in s)
    return closed + len(batcher.flush())


def sentinel_users(tag: str) -> set[str]:
    """One user name per partition."""
    found: dict[int, str] = {}
    k = 0
    while len(found) < PARTITIONS:
        name = f"{tag}-sentinel-{k}"
        found.setdefault(partition_for(name, PARTITIONS), name)
        k += 1
    return set(found.values())


def idle_timeout() -> float:
    """The default idle timeout of ``uac worker`` (``--idle-timeout``), the one the benchmark runs."""
    from uac.cli_worker import worker

    default = next(p.default for p in worker.params if p.name == "idle_timeout")
    assert isinstance(default, float)
    return default


# --------------------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any UAC_* setting (every worker setting at its default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UAC_")}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


class Child:
    """A subprocess with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL, cwd=ROOT)

    def tail(self, lines: int = 30) -> str:
        if not self._out.closed:
            self._out.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.log.stem} exited with {self.proc.returncode}:\n{self.tail()}")

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far (all its threads)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._out.close()


def start_worker(bootstrap: str, prefix: str, work: Path, worker_id: str = "bench") -> Child:
    """``uac worker`` with the checkpoint agent, the offline model, defaults otherwise; healthy."""
    port = free_port()
    cmd = [sys.executable, "-c", "from uac.cli import main; main()", "worker", "--bootstrap",
           bootstrap, "--prefix", prefix, "--port", str(port), "--worker-id", worker_id]
    child = Child(cmd, work / f"worker-{worker_id}.log",
                  clean_env(UAC_DATA_DIR=str(work / "data" / worker_id), UAC_WORKER_CHECKPOINT="1"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        child.check()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return child
        except OSError:
            pass
        time.sleep(0.2)
    child.stop()
    raise RuntimeError(f"the worker was not healthy within 60 s:\n{child.tail()}")


class Workers:
    """Several workers of one consumer group, paused, resumed, checked and stopped together."""

    def __init__(self, children: list[Child]) -> None:
        self.children = children

    def pause(self) -> None:
        for c in self.children:
            c.pause()

    def resume(self) -> None:
        for c in self.children:
            c.resume()

    def check(self) -> None:
        for c in self.children:
            c.check()

    def cpu_seconds(self) -> float:
        return sum(c.cpu_seconds() for c in self.children)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(f"{c.log.stem}:\n{c.tail(lines)}" for c in self.children)

    def stop(self) -> None:
        for c in self.children:
            c.stop()


def start_workers(bootstrap: str, prefix: str, work: Path, count: int) -> Workers:
    """``count`` healthy workers sharing the partitions (one group), the group settled: a round
    starting while the last one joins would time a rebalance too."""
    started: list[Child] = []
    try:
        for k in range(count):
            started.append(start_worker(bootstrap, prefix, work, f"bench{k + 1}"))
        if count > 1:
            asyncio.run(group_settled(bootstrap, prefix, count, Workers(started)))
    except BaseException:
        Workers(started).stop()
        raise
    return Workers(started)


async def group_settled(bootstrap: str, prefix: str, members: int, workers: Workers,
                        timeout: float = 90.0) -> None:
    """Wait until the workers' consumer group is Stable with ``members`` members."""
    from aiokafka.admin import AIOKafkaAdminClient

    from uac.streams.worker import app_id

    group = app_id(Settings(topic_prefix=prefix))
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline, seen = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            workers.check()
            (response,) = await admin.describe_consumer_groups([group])
            _, _, state, _, _, found = response.groups[0][:6]
            seen = (state, len(found))
            if seen == ("Stable", members):
                return
            await asyncio.sleep(0.5)
    finally:
        await admin.close()
    raise RuntimeError(f"group {group} not Stable with {members} members within {timeout:g} s: {seen}")


def start_passthrough(bootstrap: str, source: str, dest: str, work: Path) -> Child:
    cmd = [sys.executable, "-m", "benchmarks.bench_kafka", "passthrough", bootstrap, source, dest,
           f"{source}-passthrough"]
    return Child(cmd, work / "passthrough.log", clean_env())


async def passthrough(bootstrap: str, source: str, dest: str, group: str) -> None:
    """Consume ``source``, produce every record to ``dest`` (same key and partition, acks=all),
    commit each batch once its records are acknowledged; forever."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await consumer.start()
    await producer.start()
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            sent = [await producer.send(dest, r.value, key=r.key, partition=r.partition)
                    for records in batch.values() for r in records]
            await asyncio.gather(*sent)
            if batch:
                await consumer.commit({tp: records[-1].offset + 1 for tp, records in batch.items()})
    finally:
        await producer.stop()
        await consumer.stop()


# ----------------------------------------------------------------------------------------- rounds


async def tail_consumer(bootstrap: str, topics: Sequence[str]) -> Any:
    """A consumer (no group) of every partition of ``topics``, positioned at their current ends."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    parts = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    consumer.assign(parts)
    await consumer.seek_to_end(*parts)
    for tp in parts:
        await consumer.position(tp)
    return consumer


async def follow(consumer: Any, feed: Any, until: Any, timeout: float, what: str,
                 check: Any = None) -> None:
    """Feed every consumed record to ``feed(record)`` until ``until()``; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done within {timeout:.0f} s")
        if check is not None:
            check()
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            for r in records:
                feed(r)


async def send_all(producer: Any, sessions: Sequence[Sequence[Turn]]) -> float:
    """Send every session in order, IN_FLIGHT lanes at once; a user's turns all go through one
    lane, one after the other (their order on the partition is the order of the data); seconds."""
    lanes: list[list[Turn]] = [[] for _ in range(IN_FLIGHT)]
    for turns in sessions:
        lanes[partition_for(turns[0].user_id, IN_FLIGHT)].extend(turns)
    started = time.perf_counter()

    async def lane(turns: list[Turn]) -> None:
        for turn in turns:
            await producer.send_turn(turn)

    await asyncio.gather(*(lane(turns) for turns in lanes))
    return time.perf_counter() - started


async def backlog(producer: Any, sessions: Sequence[Sequence[Turn]], child: Child | Workers
                  ) -> tuple[float, float]:
    """Send the sessions while ``child`` is stopped (SIGSTOP), then let it go (SIGCONT): a backlog
    of every record at once. (perf_counter at the SIGCONT, seconds the sends took)."""
    child.pause()
    try:
        sent = await send_all(producer, sessions)
    finally:
        started = time.perf_counter()
        child.resume()
    return started, sent


@dataclass
class Watch:
    """What one pipeline round put on ``uac.facts`` and ``uac.state``."""

    facts_topic: str
    users: set[str]
    windows: int
    sentinels: set[str]
    ticks: int = 0
    facts: int = 0
    done: int = 0

    def __post_init__(self) -> None:
        self._ticks: set[bytes] = set()
        self._done: set[str] = set()

    def feed(self, record: Any) -> None:
        user = user_of_key(record.key or b"")
        if record.topic != self.facts_topic:
            if user in self.sentinels:
                self._done.add(user)
                self.done = len(self._done)
        elif user in self.users:
            if b"/_tick/" in record.key:
                self._ticks.add(record.key)  # a window extracted twice (a rebalance) counts once
                self.ticks = len(self._ticks)
            else:
                self.facts += 1


async def send_sentinels(producer: Any, sentinels: set[str], at: datetime) -> None:
    """Per partition, an observation and then a tick at ``at`` (closes the checkpoint window)."""
    from uac.domains.facts import iso

    async def one(user: str) -> None:
        stamp = iso(at - timedelta(hours=1))
        await producer.send_observation({"user": user, "type": "allergy", "source_id": user,
                                         "attributes": {"substance": "latex"},
                                         "valid_time": stamp, "observed_time": stamp})
        await producer.send_tick(at, user_id=user)

    await asyncio.gather(*(one(u) for u in sorted(sentinels)))


@dataclass(frozen=True)
class Outcome:
    """One timed round: seconds from the release of the backlog to the end, and what happened."""

    records: int
    seconds: float
    sent: float
    cpu: float
    """CPU seconds the consuming process (worker or passthrough) used in the round."""
    extracted: float | None = None
    facts: int = 0

    @property
    def rate(self) -> float:
        return self.records / self.seconds


async def pipeline_round(bootstrap: str, prefix: str, sessions: Sequence[Sequence[Turn]], tag: str,
                         worker: Workers) -> Outcome:
    """The sessions as a backlog; wait for every window's tick, then for the sentinels' state."""
    from uac.client import UacProducer

    watch = Watch(prefix + "uac.facts", {s[0].user_id for s in sessions}, windows_of(sessions),
                  sentinel_users(tag))
    end = max(t.timestamp for s in sessions for t in s) + timedelta(days=1)
    n = sum(len(s) for s in sessions)
    consumer = await tail_consumer(bootstrap, [prefix + "uac.facts", prefix + "uac.state"])
    try:
        async with UacProducer(bootstrap, prefix=prefix) as producer:
            cpu = worker.cpu_seconds()
            started, sent = await backlog(producer, sessions, worker)
            await follow(consumer, watch.feed, lambda: watch.ticks >= watch.windows, 60 + n / 40,
                         f"{tag}: extraction", worker.check)
            extracted = time.perf_counter()
            await send_sentinels(producer, watch.sentinels, end)
            await follow(consumer, watch.feed, lambda: watch.done >= len(watch.sentinels), 60,
                         f"{tag}: checkpoint", worker.check)
            finished = time.perf_counter()
            cpu = worker.cpu_seconds() - cpu
    finally:
        await consumer.stop()
    return Outcome(n, finished - started, sent, cpu, extracted - started, watch.facts)


async def passthrough_round(bootstrap: str, source_prefix: str, dest: str,
                            sessions: Sequence[Sequence[Turn]], child: Child) -> Outcome:
    """The sessions as a backlog on the passthrough's input; wait until all are on its output."""
    from uac.client import UacProducer

    n = sum(len(s) for s in sessions)
    seen = [0]

    def feed(_record: Any) -> None:
        seen[0] += 1

    consumer = await tail_consumer(bootstrap, [dest])
    try:
        async with UacProducer(bootstrap, prefix=source_prefix) as producer:
            cpu = child.cpu_seconds()
            started, sent = await backlog(producer, sessions, child)
            await follow(consumer, feed, lambda: seen[0] >= n, 60 + n / 200, "passthrough", child.check)
            finished = time.perf_counter()
            cpu = child.cpu_seconds() - cpu
    finally:
        await consumer.stop()
    return Outcome(n, finished - started, sent, cpu)


# ---------------------------------------------------------------------------------------- latency

ALLERGY = "I'm severely allergic to penicillin, it gives me hives."


def latency_sessions(samples: int) -> tuple[list[list[Turn]], list[list[Turn]]]:
    """Per sample user: a penicillin-allergy session, and a later prescription of a penicillin."""
    users = [f"lat-u{i:04d}" for i in range(samples)]
    minute = timedelta(minutes=1)
    allergies = [session(u, 0, LATENCY_START + i * minute, [ALLERGY]) for i, u in enumerate(users)]
    later = LATENCY_START + timedelta(days=30)
    prescriptions = [session(u, 1, later + i * minute, [
        f"Dr. Okafor prescribed me {CONFLICTING[i % len(CONFLICTING)]} 500 mg today."])
        for i, u in enumerate(users)]
    return allergies, prescriptions


async def paced(producer: Any, sessions: Sequence[Sequence[Turn]], interval: float,
                sent: dict[str, tuple[float, float]]) -> None:
    """One session every ``interval`` seconds; ``sent[user]`` = (perf_counter, time) at its send."""
    start = time.perf_counter()
    for i, turns in enumerate(sessions):
        await asyncio.sleep(max(0.0, start + i * interval - time.perf_counter()))
        sent[turns[0].user_id] = (time.perf_counter(), time.time())
        for turn in turns:
            await producer.send_turn(turn)


class LatencyWatch:
    """What the latency samples put on ``uac.facts``, ``uac.state`` and ``uac.alerts``."""

    def __init__(self, users: set[str]) -> None:
        from uac.streams.avro import AvroCodec

        self.codec = AvroCodec()
        self.users = users
        self.in_state: set[str] = set()
        self.sent: dict[str, tuple[float, float]] = {}
        """user -> (perf_counter, time.time) at the send of their prescription turn."""
        self.fact: dict[str, float] = {}
        """user -> seconds from the send to their medication fact's record timestamp."""
        self.alert: dict[str, tuple[float, float]] = {}
        """user -> seconds from the send to the alert: seen by this consumer, record timestamp."""

    def feed(self, r: Any) -> None:
        from uac.executor.alerts import AlertEvent, AlertEventKind

        user = user_of_key(r.key or b"")
        if user not in self.users:
            return
        if r.topic.endswith("uac.state"):
            self.in_state.add(user)
        elif user not in self.sent or r.value is None:
            return
        elif r.topic.endswith("uac.facts"):
            if b"/_tick/" not in r.key:
                self.fact.setdefault(user, r.timestamp / 1000 - self.sent[user][1])
        elif user not in self.alert:
            event = self.codec.decode_as("uac.alerts", r.value, AlertEvent)
            if event.kind == AlertEventKind.RAISED and event.alert.rule_id == "drug_allergy":
                self.alert[user] = (time.perf_counter() - self.sent[user][0],
                                    r.timestamp / 1000 - self.sent[user][1])


async def turn_to_alert(bootstrap: str, prefix: str, samples: int, interval: float,
                        worker: Workers) -> dict[str, list[float]]:
    """Seconds from a prescription turn's send to its raised alert: as seen by a consumer of
    ``uac.alerts`` ("seen"), by the alert record's timestamp ("published"), and to the record
    timestamp of the turn's fact on ``uac.facts`` ("fact")."""
    from uac.client import UacProducer

    allergies, prescriptions = latency_sessions(samples)
    watch = LatencyWatch({s[0].user_id for s in allergies})
    topics = [prefix + "uac.facts", prefix + "uac.state", prefix + "uac.alerts"]
    consumer = await tail_consumer(bootstrap, topics)
    try:
        async with UacProducer(bootstrap, prefix=prefix) as producer:
            await send_all(producer, allergies)
            await follow(consumer, watch.feed, lambda: len(watch.in_state) >= samples, 90,
                         "allergies", worker.check)
            task = asyncio.create_task(paced(producer, prescriptions, interval, watch.sent))
            await follow(consumer, watch.feed, lambda: len(watch.alert) >= samples,
                         60 + samples * interval, "turn -> alert", worker.check)
            await task
    finally:
        await consumer.stop()
    return {"seen": [a[0] for a in watch.alert.values()],
            "published": [a[1] for a in watch.alert.values()], "fact": list(watch.fact.values())}


# ------------------------------------------------------------------------------------------- runs


async def measure_worker(bootstrap: str, prefix: str, cfg: Config, sessions: list[list[Turn]],
                         worker: Workers, latency: bool) -> tuple[Outcome, dict[str, list[float]] | None]:
    """A warm-up round (the worker's first model call imports litellm), the timed round, then
    (``latency``) the turn -> alert samples."""
    await pipeline_round(bootstrap, prefix, workload(cfg.seed + 1, "warm", 40, 2, WARM_START), "warm",
                         worker)
    settle()
    outcome = await pipeline_round(bootstrap, prefix, sessions, "run", worker)
    if not latency:
        return outcome, None
    return outcome, await turn_to_alert(bootstrap, prefix, cfg.kafka_latency_samples,
                                        cfg.kafka_latency_interval, worker)


def pipeline_repeat(bootstrap: str, cfg: Config, sessions: list[list[Turn]], latency: bool,
                    workers: int = 1) -> tuple[Outcome, dict[str, list[float]] | None]:
    """Fresh topics (a new prefix) and fresh workers (one group); stopped at the end."""
    from uac.streams.topics import ensure_topics

    prefix = f"bench-{uuid.uuid4().hex[:8]}-"
    work = cfg.work / "kafka" / prefix.rstrip("-")
    work.mkdir(parents=True)
    asyncio.run(ensure_topics(bootstrap, partitions=PARTITIONS, prefix=prefix))
    worker = start_workers(bootstrap, prefix, work, workers)
    try:
        return asyncio.run(measure_worker(bootstrap, prefix, cfg, sessions, worker, latency))
    except BaseException:
        print(f"[kafka] worker log tail:\n{worker.tail()}", file=sys.stderr, flush=True)
        raise
    finally:
        worker.stop()


async def measure_passthrough(bootstrap: str, prefix: str, dest: str, cfg: Config,
                              sessions: list[list[Turn]], child: Child) -> Outcome:
    """A warm-up round, then PASSES timed rounds of the sessions (it takes a fraction of a
    second: the median of a few is steadier); the median round."""
    await passthrough_round(bootstrap, prefix, dest, workload(cfg.seed + 1, "warm", 40, 2, WARM_START),
                            child)
    rounds = []
    for _ in range(PASSES):
        settle()
        rounds.append(await passthrough_round(bootstrap, prefix, dest, sessions, child))
    return sorted(rounds, key=lambda o: o.seconds)[len(rounds) // 2]


def passthrough_repeat(broker: Any, cfg: Config, sessions: list[list[Turn]]) -> Outcome:
    """Fresh topics and a fresh passthrough process; stopped at the end."""
    prefix = f"pass-{uuid.uuid4().hex[:8]}-"
    work = cfg.work / "kafka" / prefix.rstrip("-")
    work.mkdir(parents=True)
    source = broker.create_topic(prefix + "uac.turns", PARTITIONS)
    dest = broker.create_topic(prefix + "out", PARTITIONS)
    child = start_passthrough(broker.bootstrap, source, dest, work)
    try:
        return asyncio.run(measure_passthrough(broker.bootstrap, prefix, dest, cfg, sessions, child))
    except BaseException:
        print(f"[kafka] passthrough log tail:\n{child.tail()}", file=sys.stderr, flush=True)
        raise
    finally:
        child.stop()


def embedded_repeat(cfg: Config, sessions: list[list[Turn]]) -> Outcome:
    """The same turns through the embedded pipeline (``api.ingest_turns``, the offline model, a
    fresh data directory) in this process, after a warm-up: the work without Kafka."""
    from uac import api

    work = cfg.work / "kafka" / f"embedded-{uuid.uuid4().hex[:8]}"
    api.ingest_turns([t for s in workload(cfg.seed + 1, "warm", 40, 2, WARM_START) for t in s],
                     settings=Settings(data_dir=work / "warm"))
    turns = [t for s in sessions for t in s]
    settle()
    cpu, started = time.process_time(), time.perf_counter()
    summary = api.ingest_turns(turns, settings=Settings(data_dir=work / "run"))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return Outcome(len(turns), seconds, 0.0, cpu, None, summary.appended)


def unavailable() -> str | None:
    """Why the benchmark cannot run here (no Java, no broker jars, no aiokafka), or None."""
    from uac.streams.testbroker import DEFAULT_JAR_CACHE, DEFAULT_LOG4J_CONFIG

    if shutil.which("java") is None:
        return "Java is not on PATH (the Kafka broker needs Java 17+)"
    if not any(DEFAULT_JAR_CACHE.glob("kafka_*.jar")):
        return f"no Kafka jars in {DEFAULT_JAR_CACHE} (run `make broker-jars`)"
    if not DEFAULT_LOG4J_CONFIG.is_file():
        return f"no log4j2 config at {DEFAULT_LOG4J_CONFIG}"
    try:
        import aiokafka  # noqa: F401
        import faust  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed"
    return None


def run(cfg: Config) -> list[Figure]:
    """Pipeline turns/s vs the passthrough (target ratio), turn -> alert p50/p99 (target p99)."""
    from uac.streams.testbroker import DEFAULT_JAR_CACHE, KafkaBroker

    reason = unavailable()
    if reason is not None:
        print(f"[kafka] skipped: {reason}", flush=True)
        return [Figure("kafka_skipped", "Kafka benchmark", None, "", 0, display=f"skipped: {reason}")]
    sessions = workload(cfg.seed, "run", cfg.kafka_users, cfg.kafka_sessions, DATA_START)
    load = os.getloadavg()[0]
    runs = Runs()
    latency: dict[str, list[float]] | None = None
    with KafkaBroker(DEFAULT_JAR_CACHE, base_dir=cfg.work) as broker:
        for k in range(cfg.kafka_repeats):
            pipe, lat = pipeline_repeat(broker.bootstrap, cfg, sessions, k == cfg.kafka_repeats - 1)
            latency = lat or latency
            runs.pipes.append(pipe)
            runs.passes.append(passthrough_repeat(broker, cfg, sessions))
            runs.pairs.append(pipeline_repeat(broker.bootstrap, cfg, sessions, False, workers=2)[0])
            runs.embedded.append(embedded_repeat(cfg, sessions))
            print(f"[kafka] repeat {k + 1}: pipeline {pipe.rate:,.0f} turns/s ({pipe.seconds:.1f} s), "
                  f"two workers {runs.pairs[-1].rate:,.0f} turns/s, embedded "
                  f"{runs.embedded[-1].rate:,.0f} turns/s, passthrough {runs.passes[-1].rate:,.0f} "
                  f"records/s ({runs.passes[-1].seconds:.1f} s)", flush=True)
    assert latency is not None
    return figures(cfg, sessions, runs, latency, load)


@dataclass
class Runs:
    """Every repeat's timed rounds: one worker, the passthrough, two workers, the embedded pipeline."""

    pipes: list[Outcome] = field(default_factory=list)
    passes: list[Outcome] = field(default_factory=list)
    pairs: list[Outcome] = field(default_factory=list)
    embedded: list[Outcome] = field(default_factory=list)


def figures(cfg: Config, sessions: list[list[Turn]], runs: Runs, latency: dict[str, list[float]],
            load: float) -> list[Figure]:
    what = (f"{runs.pipes[0].records:,} turns ({cfg.kafka_users} users x {cfg.kafka_sessions} "
            f"sessions, {windows_of(sessions):,} windows) as one backlog, {PARTITIONS} partitions, one "
            f"worker; load average {load:.2f} at start; median of {len(runs.pipes)} repeat(s), fresh "
            "topics each")
    return (throughput_figures(runs.pipes, runs.passes, what) + scaling_figures(runs)
            + latency_figures(cfg, latency))


def scaling_figures(runs: Runs) -> list[Figure]:
    """Two workers of one group against one, and one worker against the embedded pipeline."""
    one, two = [p.rate for p in runs.pipes], [p.rate for p in runs.pairs]
    embedded = [p.rate for p in runs.embedded]
    n, count = runs.pipes[0].records, len(runs.pipes)
    return [
        Figure("kafka_two_workers_turns_per_s", "Kafka, two workers of one group, turns end to end",
               median(two), "turns/s", count,
               detail={"turns_per_s": two, "cpu_ms_per_turn": [1000 * p.cpu / n for p in runs.pairs]},
               note="the same backlog, timed the same way, with two `uac worker` processes sharing "
                    "the 8 partitions (this machine has 2 cores, shared with the broker)"),
        Figure("kafka_two_workers_vs_one", "Kafka, two workers / one worker",
               median([b / a for a, b in zip(one, two, strict=True)]), "x", count,
               note="median of the per-repeat ratios"),
        Figure("kafka_embedded_turns_per_s", "embedded pipeline, the same turns (no Kafka)",
               median(embedded), "turns/s", count,
               detail={"turns_per_s": embedded, "cpu_ms_per_turn": [1000 * p.cpu / n for p in runs.embedded]},
               note="api.ingest_turns of the same turns in one process, offline model, a fresh data "
                    "directory (DuckDB store, fsynced fact log)"),
        Figure("kafka_worker_vs_embedded", "Kafka worker throughput / embedded pipeline",
               median([a / e for a, e in zip(one, embedded, strict=True)]), "x", count,
               note="median of the per-repeat ratios: the worker's rate over the embedded "
                    "pipeline's on the same work"),
    ]


def throughput_figures(pipes: list[Outcome], passes: list[Outcome], what: str) -> list[Figure]:
    n, runs = pipes[0].records, len(pipes)
    rates, ceiling = [p.rate for p in pipes], [p.rate for p in passes]
    return [
        Figure("kafka_pipeline_turns_per_s", "Kafka worker, turns end to end (offline model)",
               median(rates), "turns/s", runs,
               detail={"turns_per_s": rates, "seconds": [p.seconds for p in pipes],
                       "facts": pipes[-1].facts, "send_seconds": [p.sent for p in pipes]},
               note=f"{what}; from the release of the backlog until every window's tick is on "
                    "uac.facts and a sentinel behind them per partition is on uac.state (includes "
                    "the idle timeout that closes each user's last window)"),
        Figure("kafka_extracted_turns_per_s", "Kafka worker, turns to facts (extraction only)",
               median([n / p.extracted for p in pipes if p.extracted]), "turns/s", runs,
               note="from the release of the backlog until the last window's tick is on uac.facts"),
        Figure("kafka_worker_cpu_ms_per_turn", "Kafka worker CPU time per turn",
               median([1000 * p.cpu / n for p in pipes]), "ms", runs,
               detail={"worker_cpu_share_pct": [round(100 * p.cpu / p.seconds) for p in pipes],
                       "passthrough_cpu_ms_per_record": [1000 * p.cpu / n for p in passes]},
               note="user + system CPU of the worker process (all threads) over the round; its "
                    "share of the round's wall time is in the detail"),
        Figure("kafka_passthrough_per_s", "raw aiokafka passthrough of the same turns (ceiling)",
               median(ceiling), "records/s", runs,
               detail={"records_per_s": ceiling, "seconds": [p.seconds for p in passes]},
               note="a subprocess: consume, produce each record to another topic (acks=all, "
                    "idempotent), commit per batch; the same backlog, until all are on the output; "
                    f"per repeat the median of {PASSES} rounds"),
        Figure("kafka_pipeline_vs_passthrough", "Kafka worker throughput / passthrough",
               median([p / q for p, q in zip(rates, ceiling, strict=True)]), "x", runs, 0.5, "min",
               primary=True, note="median of the per-repeat ratios (each pair run back to back)"),
    ]


def latency_figures(cfg: Config, latency: dict[str, list[float]]) -> list[Figure]:
    from uac.streams.worker import idle_check_interval

    idle = idle_timeout()
    seen = [1000 * s for s in latency["seen"]]
    published = [1000 * s for s in latency["published"]]
    fact = [1000 * s for s in latency["fact"]]
    what = (f"{len(seen)} users with a penicillin allergy in state, one prescription turn (and the "
            f"assistant's reply) every {cfg.kafka_latency_interval:g} s; from the send until the "
            "raised drug_allergy alert reaches a consumer of uac.alerts")
    window = (f"the window is the worker's idle timeout, {idle:g} s by default: it closes a user's "
              "extraction window once no turn of theirs came for that long (the worker's timer looks "
              f"every {idle_check_interval(idle):g} s); the checkpoint window is then closed by "
              "the tick that ends the extraction window")
    return [
        Figure("kafka_turn_alert_p50_ms", "turn -> alert latency p50, default window",
               percentile(seen, 50), "ms", len(seen),
               detail={"published_p50_ms": percentile(published, 50),
                       "fact_published_p50_ms": percentile(fact, 50)},
               note=f"{what}; published: by the alert record's timestamp; fact_published: to "
                    "the timestamp of the turn's fact on uac.facts (the extraction's share)"),
        Figure("kafka_turn_alert_p99_ms", "turn -> alert latency p99, default window",
               percentile(seen, 99), "ms", len(seen), 1000 * (idle + 0.1), "max",
               primary=True,
               detail={"published_p99_ms": percentile(published, 99), "min_ms": min(seen),
                       "max_ms": max(seen), "fact_published_p99_ms": percentile(fact, 99)},
               note=f"target: the window + 100 ms, where {window}"),
    ]


if __name__ == "__main__" and sys.argv[1:2] == ["passthrough"]:
    asyncio.run(passthrough(*sys.argv[2:6]))
