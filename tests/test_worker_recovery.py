"""The worker's checkpoint agent under SIGKILL, as real subprocesses against the real broker.

8,400 observations of 12 users go through ``uac worker --checkpoint``; the worker is SIGKILLed three
times while it folds them and started again. Each restart takes its partitions over from
``uac.state`` and ``uac.alerts`` plus the facts after the group's committed offset
(:mod:`uac.streams.worker_restore`). At the end the live state on ``uac.state`` must equal what the
embedded pipeline computes from the same observations, the alerts open at the end must be the same,
and no alert may be raised twice while open (a duplicate only as the identical record).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.test_worker_robustness import (  # noqa: F401  (fixtures)
    IDLE,
    PARTITIONS,
    Worker,
    committed,
    end_offsets,
    prefix,
    read_all,
    workers,
)
from uac import api
from uac.executor.alerts import AlertEvent, AlertEventKind
from uac.settings import Settings
from uac.streams.avro import AvroCodec
from uac.streams.topics import partition_for, state_key
from uac.testing import generate_history, write_jsonl

USERS, PER_USER = 12, 700
KILL_AT_STATE_RECORDS = (800, 3000, 5500)
END = datetime(2025, 7, 1, tzinfo=UTC)
"""A final clock tick, on every partition and in the embedded run: time-based rules judge both at
the same event time (each partition's watermark is its own otherwise)."""


def observations() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(USERS):
        out += [dict(o) for o in generate_history(f"rec-{i:02d}", PER_USER, seed=100 + i)]
    return sorted(out, key=lambda o: (o["observed_time"], o["user"]))


async def _produce(bootstrap: str, prefix_: str, records: list[dict[str, Any]], partitions: int) -> None:
    from uac.client import UacProducer

    by_user: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_user.setdefault(r["user"], []).append(r)
    async with UacProducer(bootstrap, prefix=prefix_) as client:
        async def one(user_records: list[dict[str, Any]]) -> None:  # in order, users concurrently
            for r in user_records:
                await client.send_observation(r)

        await asyncio.gather(*(one(rs) for rs in by_user.values()))
        on = {partition_for(u, partitions): u for u in sorted(by_user)}
        assert len(on) == partitions, "every partition must get the final tick"
        for user in on.values():
            await client.send_tick(END, user_id=user)


def state_records(bootstrap: str, prefix_: str) -> int:
    return sum(end_offsets(bootstrap, prefix_ + "uac.state").values())


def wait_state(bootstrap: str, prefix_: str, target: int, worker: Worker, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while state_records(bootstrap, prefix_) < target:
        worker.check_alive()
        assert time.monotonic() < deadline, f"fewer than {target} uac.state records in time"
        time.sleep(0.2)


def wait_folded(bootstrap: str, prefix_: str, worker: Worker, timeout: float) -> None:
    """Until the group's committed offsets of uac.observations and uac.facts reach their ends (every
    fact folded, its window's outputs out) and uac.state got nothing new for an idle timeout."""
    deadline = time.monotonic() + timeout
    group = prefix_ + "uac"
    last, since = -1, time.monotonic()
    while True:
        worker.check_alive()
        total = state_records(bootstrap, prefix_)
        if total != last:
            last, since = total, time.monotonic()
        done = all(committed(bootstrap, group, prefix_ + t).get(p, -1) >= end
                   for t in ("uac.observations", "uac.facts")
                   for p, end in end_offsets(bootstrap, prefix_ + t).items() if end > 0)
        if done and time.monotonic() - since >= IDLE:
            return
        assert time.monotonic() < deadline, f"not folded in time ({total} uac.state records)"
        time.sleep(0.5)


def final_state(bootstrap: str, prefix_: str) -> dict[bytes, dict[str, Any]]:
    codec, latest = AvroCodec(), {}
    for key, value in read_all(bootstrap, prefix_ + "uac.state"):
        latest[key] = codec.decode_entity(key, value)
    return {k: r.attributes for k, r in latest.items() if r.exists}


def alert_history(bootstrap: str, prefix_: str) -> tuple[set[str], set[str]]:
    """The alerts open at the end and every alert raised; fails on a second raise of an open alert."""
    codec, last, raised = AvroCodec(), {}, set()
    for _, value in read_all(bootstrap, prefix_ + "uac.alerts"):
        event = codec.decode_as("uac.alerts", value, AlertEvent)
        before = last.get(event.alert.alert_id)
        assert before is None or before.kind is not event.kind or before == event, (before, event)
        last[event.alert.alert_id] = event
        if event.kind is AlertEventKind.RAISED:
            raised.add(event.alert.alert_id)
    return {a for a, e in last.items() if e.kind is AlertEventKind.RAISED}, raised


@pytest.mark.kafka
@pytest.mark.slow
def test_checkpoint_agent_killed_three_times_ends_with_the_embedded_state(
        kafka_broker: Any, prefix: str, workers: Callable[[str], Worker], tmp_path: Path) -> None:  # noqa: F811
    records = observations()
    assert len(records) >= 8_000
    bootstrap = kafka_broker.bootstrap

    embedded = Settings(data_dir=tmp_path / "embedded")
    api.ingest(write_jsonl(records, tmp_path / "obs.jsonl"), settings=embedded)
    api.tick(END, settings=embedded)
    want_state = {state_key(u, r.entity_type, r.entity_id): r.attributes
                  for u in api.users(settings=embedded) for r in api.state(u, settings=embedded)}
    want_open = {a.alert_id for u in api.users(settings=embedded)
                 for a in api.alerts(u, settings=embedded) if a.status.value == "open"}

    worker = workers("k1")
    worker.env["UAC_WORKER_CHECKPOINT"] = "1"
    worker.start().wait_healthy()
    asyncio.run(_produce(bootstrap, prefix, records, PARTITIONS))
    for target in KILL_AT_STATE_RECORDS:
        wait_state(bootstrap, prefix, target, worker, timeout=240)
        worker.kill()
        worker.start().wait_healthy()
    wait_folded(bootstrap, prefix, worker, timeout=300)

    got_state = final_state(bootstrap, prefix)
    missing, extra = want_state.keys() - got_state.keys(), got_state.keys() - want_state.keys()
    assert not missing and not extra, f"missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}"
    differ = [k for k in want_state if want_state[k] != got_state[k]]
    assert not differ, f"{len(differ)} entities differ, e.g. {differ[0]!r}: {got_state[differ[0]]} " \
                       f"!= {want_state[differ[0]]}"
    got_open, raised = alert_history(bootstrap, prefix)
    assert got_open == want_open
    assert want_open <= raised
    assert worker.tail(4000).count("restored partition") >= 3, worker.tail()
    print(f"{len(records)} observations, {state_records(bootstrap, prefix)} uac.state records, "
          f"{len(got_state)} live entities, {len(got_open)} open alerts, {len(raised)} raised")
