"""The embedded pipeline end to end: the demo story, idempotency, rejects, windows, replay."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from uac import api
from uac.checkpointer.duckdb_store import DuckDBStateStore
from uac.checkpointer.state import UserState
from uac.checkpointer.store import InMemoryStateStore, dump
from uac.executor.alerts import AlertEventKind, AlertStatus
from uac.executor.rules import Finding, RuleContext, rule
from uac.settings import Settings
from uac.streams.embedded import EmbeddedPipeline
from uac.streams.log import InMemoryFactLog
from uac.streams.observations import parse_observation
from uac.streams.rejects import InMemoryRejectStore


def obs(user: str, etype: str, attrs: dict[str, object], valid: str, source: str,
        **extra: object) -> bytes:
    return orjson.dumps({"user": user, "type": etype, "attributes": attrs, "valid_time": valid,
                         "source_id": source, **extra})


def store_bytes(settings: Settings) -> bytes:
    with DuckDBStateStore(settings.store_path, read_only=True) as store:
        return dump(store)


def test_the_demo_story(settings: Settings, demo_path: Path) -> None:
    result = api.ingest(demo_path, settings=settings)
    assert (result.appended, result.rejected, result.duplicates) == (16, 0, 0)
    alerts = {a.rule_id: a for a in api.alerts("maya", settings=settings)}

    drug = alerts["drug_allergy"]
    assert drug.status is AlertStatus.OPEN and drug.severity.value == "critical"
    assert set(drug.evidence.sources) == {"clinic-intake-2025-01-15", "pharmacy-rx-7781"}
    assert drug.raised_at == datetime(2025, 7, 8, 15, 20, tzinfo=UTC)  # event time, not wall clock

    passport = alerts["passport_validity"]  # raised by the misread expiry, resolved by the fix
    assert passport.status is AlertStatus.RESOLVED
    assert passport.resolved_at == datetime(2025, 6, 14, 10, tzinfo=UTC)
    assert "doc-scan-0201" in passport.evidence.sources

    lease = alerts["deadline_approaching"]
    assert lease.status is AlertStatus.OPEN
    assert "2025-08-01" in lease.message and "7 days left" in lease.message
    assert lease.raised_at.date().isoformat() == "2025-07-25"

    payee = alerts["payment_destination_conflict"]
    assert payee.status is AlertStatus.OPEN and len(payee.evidence.entities) == 2

    passports = [r for r in api.state("maya", settings=settings) if r.entity_type == "passport"]
    assert [p.attributes["expiry_date"] for p in passports] == ["2030-12-20"]
    by_source = {v.fact.provenance[0]: v for v in api.facts("maya", settings=settings)}
    assert by_source["doc-scan-0201"].status is api.FactStatus.SUPERSEDED
    assert by_source["doc-rescan-0614"].status is api.FactStatus.CURRENT
    # what we believed before the correction arrived
    before = api.state("maya", settings=settings, known_at=datetime(2025, 6, 1, tzinfo=UTC))
    assert [r.attributes["expiry_date"] for r in before if r.entity_type == "passport"] == [
        "2025-12-20"]


def test_reingesting_the_same_file_adds_nothing(settings: Settings, demo_path: Path) -> None:
    api.ingest(demo_path, settings=settings)
    first, log_size = store_bytes(settings), settings.log_path.stat().st_size
    again = api.ingest(demo_path, settings=settings)
    assert (again.appended, again.duplicates, again.windows, again.raised) == (0, 16, 0, 0)
    assert settings.log_path.stat().st_size == log_size
    assert store_bytes(settings) == first


def test_bad_lines_are_rejected_with_line_and_reason_and_good_ones_flow(settings: Settings,
                                                                        tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join([
        obs("ann", "allergy", {"substance": "penicillin"}, "2025-01-01", "s1"),
        b"{not json",
        obs("ann", "trip", {"destination": "Rome", "start_date": "someday"}, "2025-01-02", "s2"),
        b'{"user": "ann", "type": "trip"}',
        obs("ann", "medication", {"name": "amoxicillin"}, "2025-01-03", "s3", op="erase"),
        obs("ann", "medication", {"name": "amoxicillin"}, "2025-01-04", "s4"),
    ]) + b"\n")
    with EmbeddedPipeline(settings) as pipeline, path.open("rb") as lines:
        result = pipeline.ingest_lines(lines, path.name)
        assert pipeline.metrics.value("uac_rejects_total", step_id="ingest.parse") == 4
    assert (result.appended, result.rejected) == (2, 4)
    reasons = {r.source: r.reason for r in api.rejects(settings=settings)}
    assert set(reasons) == {"mixed.jsonl:2", "mixed.jsonl:3", "mixed.jsonl:4", "mixed.jsonl:5"}
    assert "not valid JSON" in reasons["mixed.jsonl:2"]
    assert "'start_date' must be date" in reasons["mixed.jsonl:3"]
    assert "missing field(s)" in reasons["mixed.jsonl:4"]
    assert "'op' must be one of" in reasons["mixed.jsonl:5"]
    assert [a.rule_id for a in api.alerts("ann", settings=settings)] == ["drug_allergy"]


def test_replay_reproduces_the_store_byte_for_byte(settings: Settings, demo_path: Path) -> None:
    api.ingest(demo_path, settings=settings)
    api.tick(datetime(2025, 8, 2, tzinfo=UTC), settings=settings)
    before = store_bytes(settings)
    assert api.replay(settings=settings, check=True).matches is True
    summary = api.replay(settings=settings)
    assert summary.facts == 16
    assert store_bytes(settings) == before


def test_windows_give_one_state_version_per_touched_user(settings_factory: Callable[..., Settings],
                                                         tmp_path: Path) -> None:
    settings = settings_factory(window_facts=3)
    lines = [obs("u1" if n % 2 else "u2", "transaction",
                 {"amount": n, "date": "2025-01-01", "category": "food"}, "2025-01-01", f"t{n}")
             for n in range(7)]
    with EmbeddedPipeline(settings) as pipeline:
        result = pipeline.ingest_lines(lines)
    assert result.windows == 3  # 3 + 3 + 1 facts
    with DuckDBStateStore(settings.store_path, read_only=True) as store:
        u1, u2 = store.state_changes("u1"), store.state_changes("u2")
        # facts 0..6 alternate u2, u1: windows [0 1 2] [3 4 5] [6]
        assert [c.window_id for c in u2] == [0, 1, 2] and [c.state_version for c in u2] == [1, 2, 3]
        assert [c.window_id for c in u1] == [0, 1]
        assert [len(c.changes) for c in u2] == [2, 1, 1]
        assert {c.kind.value for c in u1[0].changes} == {"created"}
        assert store.user_version("u2") == 3


def test_rules_run_only_when_their_types_change_or_on_a_tick(settings: Settings) -> None:
    calls: list[tuple[str, str]] = []

    @rule("watch_trips", reads=["trip"])
    def watch_trips(state: UserState, ctx: RuleContext) -> list[Finding]:
        calls.append(("trips", ctx.now.date().isoformat()))
        return []

    @rule("daily", reads=["deadline"], time_based=True)
    def daily(state: UserState, ctx: RuleContext) -> list[Finding]:
        calls.append(("daily", ctx.now.date().isoformat()))
        return []

    pipeline = EmbeddedPipeline(settings, rules=[watch_trips, daily], log=InMemoryFactLog(),
                                store=InMemoryStateStore(), rejects=InMemoryRejectStore())
    with pipeline:
        def send(etype: str, attrs: dict[str, object], when: str, source: str) -> None:
            pipeline.ingest([parse_observation(orjson.loads(obs("u", etype, attrs, when, source)),
                                               source)])

        send("trip", {"destination": "Oslo", "start_date": "2025-03-01"}, "2025-01-01T10:00", "a")
        send("purchase", {"item": "pen", "purchased_on": "2025-01-01"}, "2025-01-01T11:00", "b")
        assert calls == [("trips", "2025-01-01")]
        send("deadline", {"title": "taxes", "due": "2025-04-15"}, "2025-01-01T12:00", "c")
        assert calls[-1] == ("daily", "2025-01-01")
        pipeline.tick(datetime(2025, 1, 3, tzinfo=UTC))
        assert calls[-1] == ("daily", "2025-01-03") and len(calls) == 3


def test_a_crashing_rule_is_rejected_and_the_others_still_run(settings: Settings,
                                                               demo_path: Path) -> None:
    from uac.streams.embedded import default_rules

    @rule("broken", reads=["medication"])
    def broken(state: UserState, ctx: RuleContext) -> list[Finding]:
        raise ZeroDivisionError("boom")

    with EmbeddedPipeline(settings, rules=[*default_rules(), broken]) as pipeline, \
            demo_path.open("rb") as lines:
        result = pipeline.ingest_lines(lines, demo_path.name)
        assert pipeline.metrics.value("uac_rule_failures_total", rule_id="broken") == 1
    assert result.rule_failures == 1
    [reject] = [r for r in api.rejects(settings=settings) if r.step_id == "executor.rules"]
    assert "broken" in reject.source and "ZeroDivisionError: boom" in reject.reason
    assert "drug_allergy" in {a.rule_id for a in api.alerts("maya", settings=settings)}


def test_time_based_alert_follows_ticks_and_replays(settings: Settings, demo_path: Path) -> None:
    api.ingest(demo_path, settings=settings)
    later = api.tick(datetime(2025, 8, 2, tzinfo=UTC), settings=settings)
    assert later.resolved >= 1  # the lease notice date has passed: the alert clears
    stale = api.tick(datetime(2025, 7, 1, tzinfo=UTC), settings=settings)
    assert stale.ticks == 0  # event time never goes backwards
    kinds = [(e.kind, e.alert.rule_id) for e in api.alert_events("maya", settings=settings)]
    assert (AlertEventKind.RESOLVED, "deadline_approaching") in kinds
    assert api.replay(settings=settings, check=True).matches


def test_a_window_left_open_by_a_crash_is_closed_on_restart(settings: Settings) -> None:
    from uac.streams.log import FileFactLog

    fact = parse_observation(orjson.loads(obs("u", "allergy", {"substance": "latex"},
                                              "2025-01-01", "s1")), "x")
    with FileFactLog(settings.log_path) as log:  # appended, then the process died: no mark
        log.append([fact])
    with EmbeddedPipeline(settings):
        pass
    assert [r.entity_id for r in api.state("u", settings=settings)] == ["latex"]
    assert api.replay(settings=settings, check=True).matches


@pytest.mark.parametrize("bad", ["../etc", "a\nb"])
def test_user_ids_are_data_not_paths(settings: Settings, bad: str) -> None:
    api.ingest([obs(bad, "allergy", {"substance": "latex"}, "2025-01-01", "s1")], settings=settings)
    assert [r.entity_id for r in api.state(bad, settings=settings)] == ["latex"]
    assert api.query(bad, "SELECT count(*) FROM allergies", settings=settings).scalar() == 1


def test_a_store_of_an_older_schema_is_refused_with_advice_and_replay_rebuilds_it(
        settings: Settings, demo_path: Path) -> None:
    import duckdb

    from uac.errors import StoreError

    api.ingest(demo_path, settings=settings)
    before = api.alert_events("maya", settings=settings)
    con = duckdb.connect(str(settings.store_path))
    con.execute("UPDATE store.meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(StoreError, match=r"store schema 1; this uac writes schema \d+: run `uac replay`"):
        api.ingest(demo_path, settings=settings)
    api.replay(settings=settings)
    assert api.alert_events("maya", settings=settings) == before
    assert api.ingest(demo_path, settings=settings).appended == 0


def test_user_queries_do_not_see_the_stores_own_key_column(settings: Settings,
                                                           demo_path: Path) -> None:
    api.ingest(demo_path, settings=settings)
    result = api.query("maya", "SELECT * FROM entities LIMIT 1", settings=settings)
    assert result.columns == ("user_id", "entity_type", "entity_id", "attributes", "state_version")


ENDLESS = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000000000) "
           "SELECT count(*) FROM n")


def test_a_query_past_its_time_limit_is_stopped_and_the_store_answers_the_next(
        settings: Settings, demo_path: Path) -> None:
    import time

    from uac.errors import QueryError, QueryTimeoutError

    api.ingest(demo_path, settings=settings)
    limited = settings.model_copy(update={"query_timeout": 0.3})
    started = time.monotonic()
    with pytest.raises(QueryTimeoutError, match=r"longer than 0.3 s and was stopped"):
        api.query("maya", ENDLESS, settings=limited)
    assert time.monotonic() - started < 5
    assert api.query("maya", "SELECT count(*) FROM allergies", settings=limited).scalar() >= 1
    with DuckDBStateStore(settings.store_path, read_only=True) as store:  # one connection, reused
        with pytest.raises(QueryTimeoutError):
            store.query("maya", ENDLESS, timeout=0.2)
        assert store.query("maya", "SELECT 41 + 1", timeout=0.2).scalar() == 42
        rows = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {}) "
                "SELECT i FROM n")
        assert len(store.query("maya", rows.format(100_000)).rows) == 100_000
        with pytest.raises(QueryError, match="more than 100,000 rows: aggregate, or add a LIMIT"):
            store.query("maya", rows.format(100_001))


@pytest.mark.parametrize("cut", [1, 999, 1000, 1001, 1500, 2003])
def test_a_crash_mid_append_then_the_same_ingest_gives_the_store_of_a_run_without_it(
        settings_factory: Callable[..., Settings], tmp_path: Path, cut: int) -> None:
    """The log's first ``cut`` records of a clean run survive a crash (no mark after them);
    restarting and ingesting the same input again cuts the same windows: the same store."""
    from uac.streams.log import FileFactLog
    from uac.testing import generate_history, write_jsonl

    source = write_jsonl([*generate_history("a", 1300, seed=3), *generate_history("b", 1300, seed=4)],
                         tmp_path / "in.jsonl")
    clean = settings_factory("clean")
    api.ingest(source, settings=clean)
    with FileFactLog(clean.log_path, writer=False) as log:
        records = [r for _, r in log.read(0)]
    crashed = settings_factory("crashed")
    with FileFactLog(crashed.log_path) as log:  # what reached the log before the crash
        log.append(records[:cut])
    api.ingest(source, settings=crashed)
    assert store_bytes(crashed) == store_bytes(clean)
