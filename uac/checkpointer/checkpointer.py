"""The checkpointer: follows the log window by window, folds, runs rules, commits.

It never decides window boundaries (the log's writer does, with window marks),
so a replay of the log reproduces every window, state version and alert.
Each commit is written as numbered steps; see :meth:`Checkpointer._commit`.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from uac.checkpointer.fold import ChangeKind, EntityChange, bulk_gc, fold, fold_window
from uac.checkpointer.records import Checkpoint, CommitBatch, EntityRow, StateChange
from uac.checkpointer.state import EntityKey, UserState
from uac.checkpointer.store import StateStore
from uac.domains.facts import Fact, Tick, WindowMark, iso
from uac.executor.alerts import Alert, AlertEventKind, RuleFailure, select, worth_running
from uac.executor.incremental import RuleMemo, run_rule
from uac.executor.rules import Rule, RuleContext
from uac.metrics import Metrics
from uac.streams.log import FactLog
from uac.streams.rejects import Reject, RejectStore

log = logging.getLogger(__name__)
STEP_ID = "checkpoint"


@dataclass
class CheckpointSummary:
    """What a run of the checkpointer did."""

    windows: int = 0
    facts: int = 0
    users: set[str] = field(default_factory=set)
    raised: int = 0
    resolved: int = 0
    rule_failures: int = 0
    ticks: int = 0


@dataclass(frozen=True, slots=True)
class RuleSettings:
    days_ahead: int = 7
    lapse_days_ahead: int = 14


class Checkpointer:
    """Folds closed windows of ``log`` into ``store``; keeps touched users' state cached."""

    def __init__(self, log: FactLog, store: StateStore, rejects: RejectStore,
                 rules: Sequence[Rule], *, rule_settings: RuleSettings | None = None,
                 metrics: Metrics | None = None) -> None:
        self.log = log
        self.store = store
        self.rejects = rejects
        self.rules = tuple(rules)
        self.rule_settings = rule_settings or RuleSettings()
        self.metrics = metrics or Metrics()
        self.states: dict[str, UserState] = {}
        self.open_alerts: dict[str, dict[str, Alert]] = {}
        self.versions: dict[str, int] = {}
        self.memos: dict[str, dict[str, RuleMemo]] = {}
        self._checkpoint = store.checkpoint()
        # nothing committed yet (a first ingest, a replay): no user state to load from the store
        self._store_empty = self._checkpoint.window_id < 0
        self._time_rules = tuple(r for r in self.rules if r.time_based)
        self._time_types = frozenset(t for r in self._time_rules for t in r.anchors)
        # when ticks must wake whom: users with a known next recheck time (a heap), and users
        # whose time-based rules have not run yet (all of them at the first tick)
        self._wake_heap: list[tuple[datetime, str]] = []
        self._wake_at: dict[str, datetime] = {}
        self._unscheduled: set[str] = set()
        self._store_users_scheduled = self._store_empty

    @property
    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    # -- user state, loaded on first touch ------------------------------------------------------
    def user_state(self, user_id: str) -> UserState:
        """The user's folded state (loaded from the store on first use; do not mutate it)."""
        state = self.states.get(user_id)
        if state is None:
            if self._store_empty:
                state, alerts, version = UserState(user_id), {}, 0
            else:
                state = fold(self.store.load_facts(user_id)).get(user_id) or UserState(user_id)
                alerts = self.store.open_alerts(user_id)
                version = self.store.user_version(user_id)
            self.states[user_id] = state
            self.open_alerts[user_id] = alerts
            self.versions[user_id] = version
            self.memos[user_id] = {}
        return state

    # -- the loop ------------------------------------------------------------------------------
    def run(self, *, commit_every: int | None = 1,
            progress: Callable[[int], None] | None = None) -> CheckpointSummary:
        """Fold every closed window after the checkpoint; commit every ``commit_every`` windows
        (None: once at the end). Records after the last window mark wait for their mark."""
        with bulk_gc():
            return self._run(commit_every, progress)

    def _run(self, commit_every: int | None,
             progress: Callable[[int], None] | None) -> CheckpointSummary:
        summary = CheckpointSummary()
        batch: CommitBatch | None = None
        pending: list[tuple[int, Fact, bytes]] = []
        ticks: list[Tick] = []
        windows_in_batch = 0
        for offset, record, raw in self.log.read_entries(self._checkpoint.log_offset):
            if isinstance(record, Fact):
                pending.append((offset, record, raw))
            elif isinstance(record, Tick):
                ticks.append(record)
            elif isinstance(record, WindowMark):
                out = self._close_window(record.window_id, offset + 1, pending, ticks, summary)
                if batch is None:
                    batch = out
                else:
                    batch.merge(out)
                if progress is not None:
                    progress(len(pending) + len(ticks) + 1)
                pending, ticks = [], []
                windows_in_batch += 1
                if commit_every is not None and windows_in_batch >= commit_every:
                    self._commit(batch)
                    batch, windows_in_batch = None, 0
        if batch is not None:
            self._commit(batch)
        return summary

    def _close_window(self, window_id: int, next_offset: int, facts: list[tuple[int, Fact, bytes]],
                      ticks: list[Tick], summary: CheckpointSummary) -> CommitBatch:
        prev = self._checkpoint
        times = [f.observed_time for _, f, _ in facts] + [t.time for t in ticks]
        watermark = max([*times, prev.watermark] if prev.watermark else times, default=None)
        for user_id in {f.user_id for _, f, _ in facts}:  # load touched users before folding
            self.user_state(user_id)
        changes = fold_window(self.states, (f for _, f, _ in facts))
        batch = CommitBatch(Checkpoint(next_offset, window_id, watermark, prev.alert_seq))
        batch.facts = list(facts)
        for user_id, user_changes in changes.items():
            self._record_changes(batch, window_id, watermark, user_id, user_changes)
        ticked = bool(ticks) or (
            watermark is not None and prev.watermark is not None
            and watermark.date() > prev.watermark.date())
        if watermark is not None:
            self._run_rules(batch, window_id, watermark, changes, ticked, summary)
        summary.windows += 1
        summary.facts += len(facts)
        summary.ticks += int(ticked)
        summary.users.update(changes)
        self.metrics.windows.inc()
        self.metrics.facts_folded.inc(len(facts))
        self._checkpoint = batch.checkpoint
        return batch

    def _record_changes(self, batch: CommitBatch, window_id: int, now: datetime | None,
                        user_id: str, changes: list[EntityChange]) -> None:
        version = self.versions.get(user_id, 0) + 1
        self.versions[user_id] = version
        state = self.states[user_id]
        for change in changes:
            if change.kind is ChangeKind.HISTORY:
                continue
            entity = state.entities[(change.entity_type, change.entity_id)]
            batch.entities[(user_id, change.entity_type, change.entity_id)] = EntityRow(
                user_id, change.entity_type, change.entity_id, entity.exists,
                entity.current_values() if entity.exists else {}, version,
                is_new=change.kind is ChangeKind.CREATED)
        if now is not None:
            batch.state_changes.append(
                StateChange(user_id, version, window_id, now, tuple(changes)))

    def _run_rules(self, batch: CommitBatch, window_id: int, now: datetime,
                   changes: dict[str, list[EntityChange]], ticked: bool,
                   summary: CheckpointSummary) -> None:
        ctx = RuleContext(now, self.rule_settings.days_ahead, self.rule_settings.lapse_days_ahead)
        users = set(changes)
        if ticked and self._time_rules:
            users.update(self._due_users(now))
        seq = batch.checkpoint.alert_seq
        for user_id in sorted(users):
            changed: dict[str, list[EntityKey]] = {}
            for c in changes.get(user_id, ()):
                if c.kind is not ChangeKind.HISTORY:
                    changed.setdefault(c.entity_type, []).append((c.entity_type, c.entity_id))
            rules = select(self.rules, changed, ticked)
            if not rules:
                continue
            state = self.user_state(user_id)
            memos = self.memos[user_id]
            open_alerts = self.open_alerts[user_id]
            timed = False
            for rule in rules:
                timed = timed or rule.time_based
                memo = memos.get(rule.rule_id)
                if memo is None:
                    memo = memos[rule.rule_id] = RuleMemo()
                keys = [k for t in rule.reads for k in changed.get(t, ())]
                events, failure = run_rule(rule, state, ctx, open_alerts, memo, keys)
                for event in events:
                    seq += 1
                    batch.alert_events.append((seq, window_id, event))
                    raised = event.kind is AlertEventKind.RAISED
                    summary.raised += int(raised)
                    summary.resolved += int(not raised)
                    self.metrics.alerts.labels(event.alert.rule_id, event.kind.value).inc()
                if failure is not None:
                    self._reject_rule(failure, window_id)
                    summary.rule_failures += 1
            if timed:
                self._schedule(user_id)
        batch.checkpoint = Checkpoint(batch.checkpoint.log_offset, window_id,
                                      batch.checkpoint.watermark, seq)

    # -- ticks: whom time wakes ------------------------------------------------------------------
    def _due_users(self, now: datetime) -> set[str]:
        """Users a tick at ``now`` must run time-based rules for."""
        if not self._store_users_scheduled:  # restarted: every stored user once, at the first tick
            self._store_users_scheduled = True
            self._unscheduled.update(
                u for u in self.store.users_with_types(self._time_types)
                if u not in self._wake_at and u not in self.states)
        due = set(self._unscheduled)
        heap = self._wake_heap
        while heap and heap[0][0] <= now:
            wake, user_id = heapq.heappop(heap)
            if self._wake_at.get(user_id) == wake:
                del self._wake_at[user_id]
                due.add(user_id)
        return due

    def _schedule(self, user_id: str) -> None:
        """Record when ticks must next wake ``user_id``, from its time-based rules' memos."""
        state, memos = self.states[user_id], self.memos[user_id]
        wake: datetime | None = None
        for rule in self._time_rules:
            memo = memos.get(rule.rule_id)
            if memo is not None and memo.ready:
                when = memo.next_wake()
                if when is not None and (wake is None or when < wake):
                    wake = when
            elif worth_running(rule, state, self.open_alerts[user_id]):
                self._unscheduled.add(user_id)  # not run yet: the next tick runs it
                return
        self._unscheduled.discard(user_id)
        if wake is None:
            self._wake_at.pop(user_id, None)
        elif self._wake_at.get(user_id) != wake:
            self._wake_at[user_id] = wake
            heapq.heappush(self._wake_heap, (wake, user_id))

    def _reject_rule(self, failure: RuleFailure, window_id: int) -> None:
        self.metrics.rule_failures.labels(failure.rule_id).inc()
        self.metrics.rejects.labels("executor.rules").inc()
        self.rejects.add(Reject("executor.rules", f"rule {failure.rule_id}, user "
                                f"{failure.user_id}, window {window_id}", failure.reason,
                                iso(failure.at)))

    def _commit(self, batch: CommitBatch) -> None:
        started = time.perf_counter()
        # 1. make the rejects this batch produced durable (nothing refused is lost);
        self.rejects.flush()
        # 2. write state, alerts, state changes AND the new checkpoint offset in one
        #    transaction: outputs and offset land together or not at all.
        self.store.commit(batch)
        self.metrics.checkpoint_offset.set(batch.checkpoint.log_offset)
        self.metrics.commit_seconds.observe(time.perf_counter() - started)
        log.debug("[%s] committed through offset %d (window %d)", STEP_ID,
                  batch.checkpoint.log_offset, batch.checkpoint.window_id)
