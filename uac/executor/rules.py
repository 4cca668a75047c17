"""Rules: ordinary functions over typed state and event time that return findings.

A rule declares the entity types it reads, so it runs only when one of them
changed, and whether it is time-based, so it also runs on clock ticks. It
receives ``now`` (event time) in its context and never reads the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum

from uac.checkpointer.state import EntityKey, UserState
from uac.domains.facts import JsonValue


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a rule may know besides the state: event time and the rule settings."""

    now: datetime
    days_ahead: int = 7
    lapse_days_ahead: int = 14

    @property
    def today(self) -> date:
        return self.now.date()


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a rule noticed. ``subject`` must be stable: the alert id is derived from it."""

    subject: str
    message: str
    severity: Severity = Severity.WARNING
    evidence: tuple[EntityKey, ...] = ()
    details: Mapping[str, JsonValue] = field(default_factory=dict)


RuleFunction = Callable[[UserState, RuleContext], Iterable[Finding]]


@dataclass(frozen=True, slots=True)
class Rule:
    """A named rule: what it reads, whether ticks wake it, and the function itself."""

    rule_id: str
    reads: frozenset[str]
    evaluate: RuleFunction
    time_based: bool = False
    description: str = ""
    requires: frozenset[str] = frozenset()
    """The rule has nothing to say for a user without an entity of one of these types
    (e.g. no budget, no spending alert); empty means any type it reads."""

    @property
    def anchors(self) -> frozenset[str]:
        """The types a user must have for this rule to be worth running."""
        return self.requires or self.reads

    def wants(self, changed_types: Iterable[str], tick: bool) -> bool:
        """Should this rule run for a change of ``changed_types`` (and/or a clock tick)?"""
        return (tick and self.time_based) or not self.reads.isdisjoint(changed_types)


def rule(
    rule_id: str, *, reads: Iterable[str], time_based: bool = False,
    requires: Iterable[str] = (),
) -> Callable[[RuleFunction], Rule]:
    """Decorator turning a function ``(state, ctx) -> findings`` into a :class:`Rule`."""

    def wrap(fn: RuleFunction) -> Rule:
        doc = (fn.__doc__ or "").strip()
        return Rule(rule_id, frozenset(reads), fn, time_based, doc.splitlines()[0] if doc else "",
                    frozenset(requires))

    return wrap
