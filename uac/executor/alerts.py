"""Alerts: deterministic ids, raise once, resolve when the condition clears. Pure: no I/O."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from uac.checkpointer.state import StateView, UserState
from uac.domains.facts import JsonValue, derive_id
from uac.executor.rules import Finding, Rule, RuleContext, Severity

log = logging.getLogger(__name__)
ALERT_VERSION = 1


class AlertStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Evidence:
    """What an alert read: entities (``type/id``), the facts behind them, and their sources."""

    entities: tuple[str, ...] = ()
    fact_ids: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Alert:
    """An alert raised by a rule for a user about a subject; ``alert_id`` = hash(user, rule, subject)."""

    alert_id: str
    user_id: str
    rule_id: str
    subject: str
    severity: Severity
    message: str
    status: AlertStatus
    raised_at: datetime
    evidence: Evidence
    details: Mapping[str, JsonValue] = field(default_factory=dict)
    resolved_at: datetime | None = None
    version: int = ALERT_VERSION


class AlertEventKind(StrEnum):
    RAISED = "raised"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """A change in an alert's life: raised or resolved, at an event time."""

    kind: AlertEventKind
    alert: Alert
    at: datetime


@dataclass(frozen=True, slots=True)
class RuleFailure:
    """A rule that crashed or returned garbage: kept as data, sent to the reject store."""

    user_id: str
    rule_id: str
    reason: str
    at: datetime


def alert_id_for(user_id: str, rule_id: str, subject: str) -> str:
    return derive_id(user_id, rule_id, subject)


def evidence_for(state: UserState, finding: Finding) -> Evidence:
    """The entities a finding names, the live facts behind them and those facts' sources."""
    entities: list[str] = []
    fact_ids: set[str] = set()
    sources: set[str] = set()
    for etype, eid in finding.evidence:
        entities.append(f"{etype}/{eid}")
        view = state.entity(etype, eid)
        if view is not None:
            fact_ids.update(view.fact_ids)
            sources.update(view.sources)
    return Evidence(tuple(entities), tuple(sorted(fact_ids)), tuple(sorted(sources)))


def findings_of(rule: Rule, state: StateView, ctx: RuleContext) -> list[Finding]:
    """Run the rule's function; a result that is not a list of findings is an error."""
    out = list(rule.evaluate(state, ctx))
    for item in out:
        if not isinstance(item, Finding):
            raise TypeError(f"returned {type(item).__name__}, not a Finding")
    return out


def evaluate(
    state: UserState,
    rules: Sequence[Rule],
    ctx: RuleContext,
    open_alerts: dict[str, Alert],
) -> tuple[list[AlertEvent], list[RuleFailure]]:
    """Run ``rules`` over the whole ``state``; raise new alerts, resolve cleared ones, update
    ``open_alerts``. (The checkpointer gets the same result incrementally, see
    :mod:`uac.executor.incremental`.)

    An alert that is still open is not raised again. Only the rules that ran
    can resolve their own alerts; a rule that fails resolves nothing. Per rule,
    raised alerts come first, then resolved ones, each in alert id order.
    """
    events: list[AlertEvent] = []
    failures: list[RuleFailure] = []
    for rule in rules:
        if not worth_running(rule, state, open_alerts):
            continue
        ctx.rechecks.clear()
        try:
            findings = findings_of(rule, state, ctx)
        except Exception as exc:  # a rule is code; its failure is data, not a crash
            log.warning("rule %s failed for user %s: %s", rule.rule_id, state.user_id, exc)
            failures.append(RuleFailure(state.user_id, rule.rule_id,
                                        f"{type(exc).__name__}: {exc}", ctx.now))
            continue
        current: dict[str, Finding] = {}
        for finding in findings:
            current.setdefault(alert_id_for(state.user_id, rule.rule_id, finding.subject),
                               finding)
        for aid, finding in sorted(current.items()):
            if aid in open_alerts:
                continue
            events.append(raise_alert(state, rule, aid, finding, ctx, open_alerts))
        for aid, alert in sorted(open_alerts.items()):
            if alert.rule_id == rule.rule_id and aid not in current:
                events.append(resolve_alert(aid, ctx, open_alerts))
    return events, failures


def raise_alert(state: UserState, rule: Rule, aid: str, finding: Finding, ctx: RuleContext,
                open_alerts: dict[str, Alert]) -> AlertEvent:
    """Open the alert ``aid`` for ``finding`` (added to ``open_alerts``); its raised event."""
    alert = Alert(aid, state.user_id, rule.rule_id, finding.subject, finding.severity,
                  finding.message, AlertStatus.OPEN, ctx.now, evidence_for(state, finding),
                  dict(finding.details))
    open_alerts[aid] = alert
    return AlertEvent(AlertEventKind.RAISED, alert, ctx.now)


def resolve_alert(aid: str, ctx: RuleContext, open_alerts: dict[str, Alert]) -> AlertEvent:
    """Close the open alert ``aid`` (removed from ``open_alerts``); its resolved event."""
    return AlertEvent(AlertEventKind.RESOLVED, resolved(open_alerts.pop(aid), ctx.now), ctx.now)


def worth_running(rule: Rule, state: UserState, open_alerts: dict[str, Alert]) -> bool:
    """False when the user has none of the rule's anchor types and no open alert of it."""
    if any(state.by_type.get(t) for t in rule.anchors):
        return True
    return any(a.rule_id == rule.rule_id for a in open_alerts.values())


def resolved(alert: Alert, at: datetime) -> Alert:
    """The alert, resolved at ``at``."""
    return Alert(alert.alert_id, alert.user_id, alert.rule_id, alert.subject, alert.severity,
                 alert.message, AlertStatus.RESOLVED, alert.raised_at, alert.evidence,
                 alert.details, at, alert.version)


def select(rules: Iterable[Rule], changed_types: Iterable[str], tick: bool) -> list[Rule]:
    """The rules to run for a change of these types (and/or a tick), in a stable order."""
    changed = set(changed_types)
    return sorted((r for r in rules if r.wants(changed, tick)), key=lambda r: r.rule_id)
