"""Taking over a partition from ``uac.state`` and ``uac.alerts`` (no broker here: the agent's outputs
are kept as topic contents in memory; tests/test_worker_recovery.py does it on the real broker).

A checkpoint agent is "killed" after some records (what it produced stays, offsets it acknowledged
are the committed ones), a new agent restores the partition from what was produced and reads on
from the committed offset: the final state must equal a run without the crash, and so must the
alerts open at the end and the alerts ever raised."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from uac.checkpointer.records import EntityRow
from uac.domains.facts import Fact, Tick
from uac.executor.alerts import AlertEvent, AlertEventKind
from uac.settings import Settings
from uac.streams.avro import AvroCodec
from uac.streams.kafka_store import ALERTS, STATE
from uac.streams.observations import parse_line
from uac.streams.topics import fact_key, partition_for
from uac.streams.worker_checkpoint import CheckpointAgent
from uac.streams.worker_extract import FACTS, Source
from uac.streams.worker_restore import Restored, restore_batch
from uac.testing import generate_history, observation_lines

PARTITIONS = 1
DEMO = Path(__file__).resolve().parents[1] / "uac" / "examples" / "demo.jsonl"
Record = tuple[str, bytes | None, bytes | None, int]


class Topics:
    """What the agents produced, per topic, in order (the broker's side of a run)."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    async def send(self, topic: str, key: bytes | None, value: bytes | None,
                   partition: int) -> Awaitable[Any]:
        self.records.append((topic, key, value, partition))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def of(self, topic: str, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        return [(k, v) for t, k, v, p in self.records if t == topic and p == partition]


def inputs() -> list[Fact | Tick]:
    """The demo's observations and three generated users' histories, in event-time order (one
    partition holds them all)."""
    lines = [line for line in DEMO.read_text().splitlines() if line.strip() and not line.startswith("#")]
    for i, user in enumerate(("ana", "ben", "cho")):
        lines += observation_lines(generate_history(user, 250, seed=i))
    out = []
    for n, line in enumerate(lines):
        record = parse_line(line, f"line {n}")
        assert record is not None
        out.append(record)
    return sorted(out, key=lambda r: r.observed_time if isinstance(r, Fact) else r.time)


def agent(topics: Topics, restore: Callable[[int], Awaitable[Restored]] | None = None) -> CheckpointAgent:
    settings = Settings(data_dir=Path("/nonexistent"), window_facts=40)
    return CheckpointAgent(topics.send, settings=settings, partitions=PARTITIONS, idle_timeout=1.0,
                           clock=lambda: 0.0, restore=restore)


async def feed(target: CheckpointAgent, records: list[Fact | Tick], start: int, stop: int,
               acked: list[int]) -> None:
    codec = AvroCodec()
    for offset in range(start, stop):
        record = records[offset]
        user = record.user_id if isinstance(record, Fact) else "maya"
        part = partition_for(user, PARTITIONS)
        key = fact_key(user, record.fact_id) if isinstance(record, Fact) else None
        await target.on_fact(Source(FACTS, part, offset, key), codec.encode(FACTS, record),
                             lambda o=offset: acked.append(o))


def committed(acked: list[int]) -> int:
    """The offset a consumer group resumes from: after the longest acknowledged prefix."""
    done, n = set(acked), 0
    while n in done:
        n += 1
    return n


def outcome(topics: Topics) -> tuple[dict[bytes, EntityRow], set[str], set[str]]:
    """Live state per key, the alerts open at the end, every alert ever raised."""
    codec = AvroCodec()
    state: dict[bytes, EntityRow] = {}
    last: dict[str, AlertEvent] = {}
    raised: set[str] = set()
    for topic, key, value, _ in topics.records:
        if topic == STATE:
            assert key is not None
            state[key] = codec.decode_entity(key, value)
        elif topic == ALERTS:
            assert value is not None
            event = codec.decode_as(ALERTS, value, AlertEvent)
            before = last.get(event.alert.alert_id)
            # a duplicate is harmless only as the identical event: never a second raise of an open alert
            assert before is None or before.kind is not event.kind or before == event, (before, event)
            last[event.alert.alert_id] = event
            if event.kind is AlertEventKind.RAISED:
                raised.add(event.alert.alert_id)
    status = {aid: e.kind for aid, e in last.items()}
    live = {k: r for k, r in state.items() if r.exists}
    return live, {a for a, k in status.items() if k is AlertEventKind.RAISED}, raised


def run_without_crash(records: list[Fact | Tick]) -> Topics:
    topics = Topics()

    async def scenario() -> None:
        a, acked = agent(topics), []
        await feed(a, records, 0, len(records), acked)
        await a.close_idle()
    asyncio.run(scenario())
    return topics


@pytest.fixture(scope="module")
def records() -> list[Fact | Tick]:
    return inputs()


@pytest.fixture(scope="module")
def expected(records: list[Fact | Tick]) -> tuple[dict[bytes, EntityRow], set[str], set[str]]:
    return outcome(run_without_crash(records))


def same_state(got: dict[bytes, EntityRow], want: dict[bytes, EntityRow]) -> Iterator[str]:
    for key in sorted(set(got) | set(want)):
        a, b = got.get(key), want.get(key)
        if a is None or b is None or a.attributes != b.attributes:
            yield f"{key!r}: {a} != {b}"


@pytest.mark.parametrize("crash_at", [7, 120, 333, 0.5])
def test_a_takeover_restores_from_state_and_alerts_and_ends_equal(
        records: list[Fact | Tick], expected: tuple[dict[bytes, EntityRow], set[str], set[str]],
        crash_at: int | float) -> None:
    cut = int(len(records) * crash_at) if isinstance(crash_at, float) else crash_at
    topics = Topics()
    part = partition_for("maya", PARTITIONS)
    seen: list[Restored] = []

    async def restore(partition: int) -> Restored:
        restored = restore_batch(topics.of(STATE, partition), topics.of(ALERTS, partition))
        seen.append(restored)
        return restored

    async def scenario() -> None:
        first, acked = agent(topics), []
        await feed(first, records, 0, cut, acked)  # killed here: its open window is lost
        resume = committed(acked)
        assert resume <= cut
        second = agent(topics, restore)
        await feed(second, records, resume, len(records), [])
        await second.close_idle()
        assert second.holds(part)

    asyncio.run(scenario())
    assert len(seen) == 1 and seen[0].without_facts == 0 and seen[0].undecodable == 0
    live, open_alerts, raised = outcome(topics)
    want_live, want_open, want_raised = expected
    assert not list(same_state(live, want_live))
    assert open_alerts == want_open
    assert raised == want_raised


def test_a_wall_clock_tick_goes_to_every_partition_the_agent_folds(records: list[Fact | Tick]) -> None:
    from datetime import UTC, datetime

    from uac.streams.worker_checkpoint import CLOCK_USER
    from uac.streams.worker_extract import tick_key

    topics = Topics()
    at = datetime(2025, 7, 1, 12, tzinfo=UTC)

    async def scenario() -> int:
        a = agent(topics)
        assert await a.clock_tick(at) == 0  # holds no partition yet: nothing to tick
        await feed(a, records, 0, 5, [])
        return await a.clock_tick(at)

    assert asyncio.run(scenario()) == 1
    ticks = [(k, v, p) for t, k, v, p in topics.records if t == FACTS]
    assert len(ticks) == 1 and ticks[0][0] == tick_key(CLOCK_USER, Tick(at)) and ticks[0][2] == 0
    assert ticks[0][1] is not None and AvroCodec().decode(FACTS, ticks[0][1]) == Tick(at)


def test_clock_tick_needs_the_checkpoint_agent() -> None:
    from click.testing import CliRunner

    from uac.cli_worker import worker

    result = CliRunner().invoke(worker, ["--clock-tick", "60"])
    assert result.exit_code == 2 and "--clock-tick needs --checkpoint" in result.output
