"""Incremental rule evaluation raises and resolves exactly what evaluating every rule over the
whole state would, window by window, tick by tick, across a restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from benchmarks.datasets import windowed
from benchmarks.generator import FactGenerator
from uac.checkpointer.checkpointer import Checkpointer, CheckpointSummary
from uac.checkpointer.fold import ChangeKind, EntityChange
from uac.checkpointer.records import Checkpoint, CommitBatch
from uac.checkpointer.state import UserState
from uac.checkpointer.store import InMemoryStateStore, dump
from uac.domains.facts import LogRecord
from uac.executor.alerts import AlertEventKind, evaluate, select
from uac.executor.builtin import BUILTIN_RULES
from uac.executor.builtin_schedule import commitment_groups
from uac.executor.incremental import GroupView, RuleMemo, run_rule
from uac.executor.rules import EVERY_GROUP, RuleContext
from uac.streams.log import InMemoryFactLog
from uac.streams.rejects import InMemoryRejectStore

RULE_HEAVY_MIX = {
    "transaction": 0.30, "trip": 0.10, "purchase": 0.08, "event": 0.10, "appointment": 0.05,
    "deadline": 0.06, "contract": 0.04, "recurring_commitment": 0.04, "budget": 0.04,
    "passport": 0.03, "visa": 0.04, "medication": 0.04, "allergy": 0.03,
    "payment_instruction": 0.05,
}
"""Every type a built-in rule reads, often enough that most rules raise and resolve."""
MONEY_MIX = {"transaction": 0.85, "budget": 0.03, "purchase": 0.05, "payment_instruction": 0.07}
"""Enough spending per category and period to go over budgets."""
WORKLOADS = {  # name: (seed, mix, users, facts, days, window facts)
    "rules-1": (1, RULE_HEAVY_MIX, 4, 1500, 200, 40),
    "rules-7": (7, RULE_HEAVY_MIX, 4, 1500, 200, 40),
    "money-3": (3, MONEY_MIX, 2, 1500, 60, 30),
}


class FullCheckpointer(Checkpointer):
    """The reference: every selected rule runs over the whole state, every user at every tick."""

    def _run_rules(self, batch: CommitBatch, window_id: int, now: datetime,
                   changes: dict[str, list[EntityChange]], ticked: bool,
                   summary: CheckpointSummary) -> None:
        ctx = RuleContext(now, self.rule_settings.days_ahead, self.rule_settings.lapse_days_ahead)
        users = set(changes) | (set(self.states) if ticked else set())
        seq = batch.checkpoint.alert_seq
        for user_id in sorted(users):
            changed = {c.entity_type for c in changes.get(user_id, ())
                       if c.kind is not ChangeKind.HISTORY}
            rules = select(self.rules, changed, ticked)
            events, failures = evaluate(self.user_state(user_id), rules, ctx,
                                        self.open_alerts[user_id])
            assert not failures
            for event in events:
                seq += 1
                batch.alert_events.append((seq, window_id, event))
        batch.checkpoint = Checkpoint(batch.checkpoint.log_offset, window_id,
                                      batch.checkpoint.watermark, seq)


def _records(workload: str) -> list[LogRecord]:
    seed, mix, users, facts, days, window_facts = WORKLOADS[workload]
    gen = FactGenerator(seed, users, mix=mix, span=timedelta(days=days))
    return list(windowed(gen.records(facts, ticks=True), window_facts=window_facts,
                         window_span=timedelta(hours=12)))


def _run(cls: type[Checkpointer], parts: list[list[LogRecord]]) -> tuple[bytes, int]:
    """Append ``parts`` one by one, each followed by a run of a *new* checkpointer (a restart)
    over the same store; return the store's bytes and the number of alert events."""
    log, store = InMemoryFactLog(), InMemoryStateStore()
    for part in parts:
        log.append(part)
        cls(log, store, InMemoryRejectStore(), BUILTIN_RULES).run(commit_every=3)
    events = [e for u in store.users() for e in store.alert_events(u)]
    return dump(store), len(events)


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_incremental_rules_equal_full_evaluation(workload: str) -> None:
    records = _records(workload)
    full, count = _run(FullCheckpointer, [records])
    assert count > 50  # the workload really raises and resolves alerts
    incremental, _ = _run(Checkpointer, [records])
    assert incremental == full


def test_incremental_rules_equal_full_evaluation_across_restarts() -> None:
    records = _records("rules-7")
    marks = [i for i, r in enumerate(records) if type(r).__name__ == "WindowMark"]
    cut1, cut2 = marks[len(marks) // 3] + 1, marks[2 * len(marks) // 3] + 1
    full, _ = _run(FullCheckpointer, [records])
    restarted, _ = _run(Checkpointer, [records[:cut1], records[cut1:cut2], records[cut2:]])
    assert restarted == full


def test_every_rule_raises_and_resolves_in_the_workloads() -> None:
    kinds = set()
    for workload in WORKLOADS:
        log, store = InMemoryFactLog(), InMemoryStateStore()
        log.append(_records(workload))
        Checkpointer(log, store, InMemoryRejectStore(), BUILTIN_RULES).run()
        kinds.update((e.alert.rule_id, e.kind)
                     for u in store.users() for _, _, e in store.alert_events(u))
    for r in BUILTIN_RULES:
        assert (r.rule_id, AlertEventKind.RAISED) in kinds, r.rule_id
    resolved = {rule_id for rule_id, kind in kinds if kind is AlertEventKind.RESOLVED}
    assert len(resolved) >= 7, resolved


# -- the pieces ------------------------------------------------------------------------------------
def test_overlapping_events_share_a_group_and_weekly_ones_are_everywhere() -> None:
    from uac.checkpointer.fold import fold
    from uac.domains.facts import make_fact

    at = datetime(2025, 1, 1, tzinfo=UTC)

    def fact(etype: str, eid: str, **attrs: object) -> object:
        return make_fact(user_id="u", entity_type=etype, entity_id=eid, attributes=attrs,
                         valid_time=at, observed_time=at, provenance=(eid,))

    state = fold([
        fact("event", "a", start="2025-02-01T23:30:00Z", end="2025-02-02T00:30:00Z"),  # type: ignore[list-item]
        fact("event", "b", start="2025-02-02T00:00:00Z"),  # type: ignore[list-item]
        fact("recurring_commitment", "w", weekday="sunday", start_time="00:00"),  # type: ignore[list-item]
    ])["u"]
    views = {v.entity_id: v for v in state.current()}
    assert commitment_groups(views["a"]) == ("day:2025-02-01", "day:2025-02-02")
    assert commitment_groups(views["b"]) == ("day:2025-02-02",)
    assert EVERY_GROUP in commitment_groups(views["w"])


def test_a_group_view_shows_its_members_and_the_every_group_members() -> None:
    memo = RuleMemo()
    rule = next(r for r in BUILTIN_RULES if r.rule_id == "passport_validity")
    from uac.checkpointer.fold import fold
    from uac.domains.facts import make_fact

    at = datetime(2025, 1, 1, tzinfo=UTC)
    facts = [make_fact(user_id="u", entity_type=t, entity_id=i, attributes=a, valid_time=at,
                       observed_time=at, provenance=(i,))
             for t, i, a in (("trip", "t1", {"country": "JP", "start_date": "2025-03-01"}),
                             ("trip", "t2", {"country": "FR", "start_date": "2025-04-01"}),
                             ("passport", "p", {"country": "US", "expiry_date": "2025-05-01"}))]
    state: UserState = fold(facts)["u"]
    assert memo.build(rule, state) == {"trip/t1", "trip/t2"}
    view = memo.view(rule, state, "trip/t1")
    assert isinstance(view, GroupView)
    assert [v.entity_id for v in view.of_type("trip")] == ["t1"]
    assert [v.entity_id for v in view.of_type("passport")] == ["p"]
    assert view.entity("trip", "t2") is None
    ctx = RuleContext(datetime(2025, 1, 2, tzinfo=UTC))
    events, failure = run_rule(rule, state, ctx, {}, memo, [])
    assert failure is None
    assert sorted(e.alert.subject for e in events) == ["trip/t1", "trip/t2"]
    # both trips are over the day after they end: that is when time alone changes the answer
    assert memo.next_wake() == datetime(2025, 3, 2, tzinfo=UTC)
    # a passport change touches every group
    assert memo.update(rule, state, [("passport", "p")]) == {"trip/t1", "trip/t2"}
    assert memo.update(rule, state, [("trip", "t2")]) == {"trip/t2"}


def test_the_readme_rule_example_runs_and_wakes_only_when_due() -> None:
    from pathlib import Path

    from uac.checkpointer.fold import fold
    from uac.domains.facts import make_fact

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    code = readme.split("### Writing a rule", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # the README is ours, not input
    rule = namespace["visa_expiring"]
    at = datetime(2025, 1, 1, tzinfo=UTC)
    state = fold([make_fact(user_id="u", entity_type="visa", entity_id="jp",
                            attributes={"country": "JP", "valid_until": "2025-03-01"},
                            valid_time=at, observed_time=at, provenance=("s1",))])["u"]
    memo, open_alerts = RuleMemo(), {}  # type: ignore[var-annotated]
    events, failure = run_rule(rule, state, RuleContext(at), open_alerts, memo, [])  # type: ignore[arg-type]
    assert failure is None and events == []
    assert memo.next_wake() == datetime(2025, 1, 30, tzinfo=UTC)
    assert memo.due(datetime(2025, 1, 29, 23, 59, tzinfo=UTC)) == set()
    events, _ = run_rule(rule, state, RuleContext(datetime(2025, 1, 30, 0, 5, tzinfo=UTC)),  # type: ignore[arg-type]
                         open_alerts, memo, [])
    assert [e.kind for e in events] == [AlertEventKind.RAISED]
    assert memo.next_wake() == datetime(2025, 3, 2, tzinfo=UTC)
