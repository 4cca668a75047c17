"""Rules: ordinary functions over typed state and event time that return findings.

A rule declares the entity types it reads, so it runs only when one of them
changed, and whether it is time-based, so it also runs on clock ticks. It
receives ``now`` (event time) in its context and never reads the wall clock.

Two optional declarations keep a rule's cost proportional to what changed
rather than to the user's history (see :mod:`uac.executor.incremental`):

- ``group_by`` splits the entities a rule reads into independent groups (a
  deadline is its own group; a passport is in every group; a budget is in group
  ``category:dining`` and the transactions of one month in the group below it,
  ``category:dining|month:2025-06``, which also sees the budget). After a change
  only the groups of the changed entities (and those below them) run, and the
  rule sees only that group's entities (``state.group`` names it).
- ``ctx.recheck_at(when)``, called by a time-based rule, says its findings for
  what it just saw cannot change with time alone before ``when`` (``None``:
  not at all), so clock ticks wake it only then. A time-based rule that never
  calls it runs on every tick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum

from uac.checkpointer.state import EntityKey, EntityView, StateView
from uac.domains.facts import JsonValue

EVERY_GROUP = "*"
"""A group key meaning "in every group" (e.g. a passport matters to every trip)."""


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
    rechecks: list[datetime | None] = field(default_factory=list, compare=False, repr=False)
    """What :meth:`recheck_at` was told during the current evaluation (read by uac)."""

    @property
    def today(self) -> date:
        return self.now.date()

    def recheck_at(self, when: datetime | None) -> None:
        """Declare that the findings just computed hold, with time alone, until ``when``
        (``None``: until the state changes). The earliest declaration wins."""
        self.rechecks.append(when)


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a rule noticed. ``subject`` must be stable: the alert id is derived from it."""

    subject: str
    message: str
    severity: Severity = Severity.WARNING
    evidence: tuple[EntityKey, ...] = ()
    details: Mapping[str, JsonValue] = field(default_factory=dict)


RuleFunction = Callable[[StateView, RuleContext], Iterable[Finding]]
GroupFunction = Callable[[EntityView], Iterable[str]]
"""An entity -> the keys of the groups it belongs to (:data:`EVERY_GROUP`: all of them)."""


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
    group_by: GroupFunction | None = None
    """Splits the entities the rule reads into independent groups (None: one group)."""

    @property
    def anchors(self) -> frozenset[str]:
        """The types a user must have for this rule to be worth running."""
        return self.requires or self.reads

    def wants(self, changed_types: Iterable[str], tick: bool) -> bool:
        """Should this rule run for a change of ``changed_types`` (and/or a clock tick)?"""
        return (tick and self.time_based) or not self.reads.isdisjoint(changed_types)


def rule(
    rule_id: str, *, reads: Iterable[str], time_based: bool = False,
    requires: Iterable[str] = (), group_by: GroupFunction | None = None,
) -> Callable[[RuleFunction], Rule]:
    """Decorator turning a function ``(state, ctx) -> findings`` into a :class:`Rule`."""

    def wrap(fn: RuleFunction) -> Rule:
        doc = (fn.__doc__ or "").strip()
        return Rule(rule_id, frozenset(reads), fn, time_based, doc.splitlines()[0] if doc else "",
                    frozenset(requires), group_by)

    return wrap
