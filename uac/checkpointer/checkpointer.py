"""The checkpointer: follows the log window by window, folds, runs rules, commits.

It never decides window boundaries (the log's writer does, with window marks),
so a replay of the log reproduces every window, state version and alert.
Each commit is written as numbered steps; see :meth:`Checkpointer._commit`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from uac.checkpointer.fold import ChangeKind, EntityChange, bulk_gc, fold, fold_window
from uac.checkpointer.records import Checkpoint, CommitBatch, EntityRow, StateChange
from uac.checkpointer.state import UserState
from uac.checkpointer.store import StateStore
from uac.domains.facts import Fact, Tick, WindowMark, iso
from uac.executor.alerts import Alert, AlertEventKind, RuleFailure, evaluate, select
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
        self._checkpoint = store.checkpoint()
        # nothing committed yet (a first ingest, a replay): no user state to load from the store
        self._store_empty = self._checkpoint.window_id < 0
        self._time_types = frozenset(t for r in self.rules if r.time_based for t in r.anchors)
        self._tick_users: set[str] | None = None  # users a tick must wake; loaded on first tick

    @property
    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    # -- user state, loaded on first touch ------------------------------------------------------
    def _user(self, user_id: str) -> UserState:
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
            self._user(user_id)
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
                entity.current_values() if entity.exists else {}, version)
        if now is not None:
            batch.state_changes.append(
                StateChange(user_id, version, window_id, now, tuple(changes)))

    def _run_rules(self, batch: CommitBatch, window_id: int, now: datetime,
                   changes: dict[str, list[EntityChange]], ticked: bool,
                   summary: CheckpointSummary) -> None:
        ctx = RuleContext(now, self.rule_settings.days_ahead, self.rule_settings.lapse_days_ahead)
        users = set(changes)
        if self._tick_users is not None:  # keep the index of users ticks wake up to date
            self._tick_users.update(u for u in changes if self._ticks_wake(u))
        if ticked and self._time_types:
            if self._tick_users is None:
                self._tick_users = set() if self._store_empty else set(
                    self.store.users_with_types(self._time_types))
                self._tick_users.update(u for u in self.states if self._ticks_wake(u))
            users.update(self._tick_users)
        seq = batch.checkpoint.alert_seq
        for user_id in sorted(users):
            changed = {c.entity_type for c in changes.get(user_id, ())
                       if c.kind is not ChangeKind.HISTORY}
            rules = select(self.rules, changed, ticked)
            if not rules:
                continue
            state = self._user(user_id)
            events, failures = evaluate(state, rules, ctx, self.open_alerts[user_id])
            for event in events:
                seq += 1
                batch.alert_events.append((seq, window_id, event))
                raised = event.kind is AlertEventKind.RAISED
                summary.raised += int(raised)
                summary.resolved += int(not raised)
                self.metrics.alerts.labels(event.alert.rule_id, event.kind.value).inc()
            for failure in failures:
                self._reject_rule(failure, window_id)
                summary.rule_failures += 1
        batch.checkpoint = Checkpoint(batch.checkpoint.log_offset, window_id,
                                      batch.checkpoint.watermark, seq)

    def _ticks_wake(self, user_id: str) -> bool:
        by_type = self.states[user_id].by_type
        return any(t in by_type for t in self._time_types)

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
