"""Incremental rule evaluation: re-run only the rule groups a change touched or time made due.

Pure: no I/O. The checkpointer keeps one :class:`RuleMemo` per user and rule.
A memo remembers which groups each entity belongs to (``Rule.group_by``), which
alerts each group found, and when each group must be looked at again because
time passed (``RuleContext.recheck_at``). A window then costs the groups of the
entities it changed plus the groups whose recheck time came, not the user's
whole history, and it raises and resolves exactly what a full evaluation of
the rule would (``tests/test_incremental.py`` checks that window by window).

The first evaluation of a rule for a user (and the first after a failure in it)
is a full one: every group runs, and open alerts of the rule that no group
finds are resolved, as :func:`uac.executor.alerts.evaluate` does.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from uac.checkpointer.state import EntityKey, EntityState, EntityView, UserState
from uac.executor.alerts import (
    Alert,
    AlertEvent,
    RuleFailure,
    alert_id_for,
    findings_of,
    raise_alert,
    resolve_alert,
    worth_running,
)
from uac.executor.rules import EVERY_GROUP, Finding, Rule, RuleContext

log = logging.getLogger(__name__)
WHOLE = ""
"""The one group of a rule without ``group_by``: the whole state."""
SEP = "|"
"""Separates a group key's levels: group ``a|b`` also sees the members of group ``a``."""

Members = dict[str, dict[str, EntityState]]
"""entity type -> entity id -> entity."""


def ancestors(group: str) -> list[str]:
    """``"a|b|c"`` -> ``["a", "a|b"]``: the groups whose members a group also sees."""
    parts = group.split(SEP)
    return [SEP.join(parts[:i]) for i in range(1, len(parts))]


@dataclass(slots=True)
class GroupView:
    """One rule group of a user's state, read like :class:`UserState` (a ``StateView``):
    its own members, its ancestors' (``a`` for ``a|b``) and those in every group."""

    user_id: str
    group: str
    layers: list[Members]
    _cache: dict[str, list[EntityView]] = field(default_factory=dict)

    def of_type(self, entity_type: str) -> list[EntityView]:
        """The group's current entities of a type, by id."""
        views = self._cache.get(entity_type)
        if views is None:
            merged: dict[str, EntityState] = {}
            for layer in self.layers:
                merged.update(layer.get(entity_type, {}))
            views = [merged[i].view() for i in sorted(merged) if merged[i].exists]
            self._cache[entity_type] = views
        return views

    def entity(self, entity_type: str, entity_id: str) -> EntityView | None:
        """A current entity of the group, or None."""
        for layer in self.layers:
            state = layer.get(entity_type, {}).get(entity_id)
            if state is not None:
                return state.view() if state.exists else None
        return None


@dataclass(slots=True)
class RuleMemo:
    """What one rule knows about one user between windows."""

    ready: bool = False
    groups_of: dict[EntityKey, tuple[str, ...]] = field(default_factory=dict)
    members: dict[str, Members] = field(default_factory=dict)
    every: Members = field(default_factory=dict)
    parents: set[str] = field(default_factory=set)
    """Groups that have (or had) groups below them."""
    found: dict[str, frozenset[str]] = field(default_factory=dict)
    """group -> ids of the alerts its last evaluation found."""
    counts: dict[str, int] = field(default_factory=dict)
    """alert id -> how many groups found it."""
    wakes: dict[str, datetime] = field(default_factory=dict)
    _heap: list[tuple[datetime, str]] = field(default_factory=list)

    # -- membership ------------------------------------------------------------------------------
    def _place(self, rule: Rule, entity: EntityState) -> tuple[str, ...]:
        assert rule.group_by is not None
        keys = tuple(sorted(set(rule.group_by(entity.view()))))
        for key in keys:
            target = self.every if key == EVERY_GROUP else self.members.setdefault(key, {})
            target.setdefault(entity.entity_type, {})[entity.entity_id] = entity
            if SEP in key:
                self.parents.update(ancestors(key))
        if keys:
            self.groups_of[(entity.entity_type, entity.entity_id)] = keys
        return keys

    def _remove(self, key: EntityKey) -> tuple[str, ...]:
        keys = self.groups_of.pop(key, ())
        for group in keys:
            target = self.every if group == EVERY_GROUP else self.members.get(group, {})
            of_type = target.get(key[0])
            if of_type is not None:
                of_type.pop(key[1], None)
                if not of_type:
                    del target[key[0]]
            if group != EVERY_GROUP and not target:
                self.members.pop(group, None)
        return keys

    def build(self, rule: Rule, state: UserState) -> set[str]:
        """Forget everything; place every current entity the rule reads; return every group."""
        for known in (self.groups_of, self.members, self.every, self.parents, self.found,
                      self.counts, self.wakes, self._heap):
            known.clear()
        if rule.group_by is None:
            return {WHOLE}
        for entity_type in sorted(rule.reads):
            for entity in state.by_type.get(entity_type, {}).values():
                if entity.exists:
                    self._place(rule, entity)
        return self.all_groups()

    def update(self, rule: Rule, state: UserState, changed: Iterable[EntityKey]) -> set[str]:
        """Re-place changed entities; return the groups they left or joined."""
        keys = [k for k in changed if k[0] in rule.reads]
        if not keys:
            return set()
        if rule.group_by is None:
            return {WHOLE}
        affected: set[str] = set()
        for key in keys:
            affected.update(self._remove(key))
            entity = state.entities.get(key)
            if entity is not None and entity.exists:
                affected.update(self._place(rule, entity))
        if EVERY_GROUP in affected:
            return self.all_groups()
        parents = [g for g in affected if g in self.parents]
        if parents:  # a parent's members are seen by every group below it
            below = tuple(g + SEP for g in parents)
            affected.update(g for g in self.all_groups() if g.startswith(below))
        return affected

    def all_groups(self) -> set[str]:
        return set(self.members) | set(self.found) | set(self.wakes)

    def view(self, rule: Rule, state: UserState, group: str) -> UserState | GroupView:
        if rule.group_by is None:
            return state
        members = self.members
        layers = [self.every, *(members.get(a, {}) for a in ancestors(group)),
                  members.get(group, {})]
        return GroupView(state.user_id, group, [layer for layer in layers if layer])

    # -- time ------------------------------------------------------------------------------------
    def set_wake(self, group: str, wake: datetime | None) -> None:
        if wake is None:
            self.wakes.pop(group, None)
        elif self.wakes.get(group) != wake:
            self.wakes[group] = wake
            heapq.heappush(self._heap, (wake, group))

    def due(self, now: datetime) -> set[str]:
        """Groups whose recheck time is ``now`` or earlier (removed from the schedule)."""
        out: set[str] = set()
        heap = self._heap
        while heap and heap[0][0] <= now:
            wake, group = heapq.heappop(heap)
            if self.wakes.get(group) == wake:
                del self.wakes[group]
                out.add(group)
        return out

    def next_wake(self) -> datetime | None:
        """The earliest recheck time of any group (None: time alone changes nothing)."""
        heap = self._heap
        while heap and self.wakes.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None


def wake_of(rule: Rule, ctx: RuleContext) -> datetime | None:
    """When the group just evaluated must run again with time alone (None: never)."""
    if not rule.time_based:
        return None
    if not ctx.rechecks:
        return ctx.now  # said nothing: every tick
    times = [t for t in ctx.rechecks if t is not None]
    return min(times) if times else None


@dataclass(slots=True)
class _Outcome:
    raise_: dict[str, Finding] = field(default_factory=dict)
    clear: set[str] = field(default_factory=set)
    failed: str | None = None


def run_rule(
    rule: Rule, state: UserState, ctx: RuleContext, open_alerts: dict[str, Alert],
    memo: RuleMemo, changed: Iterable[EntityKey],
) -> tuple[list[AlertEvent], RuleFailure | None]:
    """Evaluate ``rule`` for a user after ``changed`` entities changed (and time moved to
    ``ctx.now``); update ``memo`` and ``open_alerts``; return events and any failure."""
    full = not memo.ready
    if full:
        if not worth_running(rule, state, open_alerts):
            return [], None
        groups = memo.build(rule, state)
    else:
        groups = memo.update(rule, state, changed) | memo.due(ctx.now)
    outcome = _Outcome()
    for group in sorted(groups):
        _run_group(rule, state, ctx, memo, group, outcome)
    counts = memo.counts
    if full:
        memo.ready = outcome.failed is None
        if memo.ready:  # what no group found any more is over
            outcome.clear.update(aid for aid, alert in open_alerts.items()
                                 if alert.rule_id == rule.rule_id)
    events: list[AlertEvent] = []
    for aid in sorted(outcome.raise_):
        if counts.get(aid, 0) > 0 and aid not in open_alerts:
            events.append(raise_alert(state, rule, aid, outcome.raise_[aid], ctx, open_alerts))
    for aid in sorted(outcome.clear):
        if counts.get(aid, 0) == 0 and aid in open_alerts:
            events.append(resolve_alert(aid, ctx, open_alerts))
    failure = None
    if outcome.failed is not None:
        failure = RuleFailure(state.user_id, rule.rule_id, outcome.failed, ctx.now)
    return events, failure


def _run_group(rule: Rule, state: UserState, ctx: RuleContext, memo: RuleMemo, group: str,
               outcome: _Outcome) -> None:
    ctx.rechecks.clear()
    try:
        findings = findings_of(rule, memo.view(rule, state, group), ctx)
    except Exception as exc:  # a rule is code; its failure is data, and changes nothing
        log.warning("rule %s failed for user %s (group %r): %s", rule.rule_id, state.user_id,
                    group, exc)
        if outcome.failed is None:
            outcome.failed = f"{type(exc).__name__}: {exc}"
        memo.set_wake(group, ctx.now)  # try again on the next tick
        return
    found: dict[str, Finding] = {}
    for finding in findings:
        found.setdefault(alert_id_for(state.user_id, rule.rule_id, finding.subject), finding)
    old = memo.found.get(group, frozenset())
    counts = memo.counts
    for aid in found.keys() - old:
        counts[aid] = counts.get(aid, 0) + 1
        outcome.raise_.setdefault(aid, found[aid])
    for aid in old - found.keys():
        left = counts[aid] - 1
        if left:
            counts[aid] = left
        else:
            del counts[aid]
        outcome.clear.add(aid)
    if found:
        memo.found[group] = frozenset(found)
    else:
        memo.found.pop(group, None)
    memo.set_wake(group, wake_of(rule, ctx))
