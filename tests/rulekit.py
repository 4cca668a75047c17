"""Test helpers for rules: real facts, the real fold, the real alert lifecycle (no mocks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from uac.checkpointer.fold import fold
from uac.checkpointer.state import UserState
from uac.domains.catalog import validate_attributes
from uac.domains.facts import Fact, Op, make_fact
from uac.executor.alerts import Alert, AlertEvent, AlertEventKind, RuleFailure, evaluate
from uac.executor.rules import Rule, RuleContext

USER = "u1"


def at(text: str) -> datetime:
    """A fixed UTC time from ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM``."""
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass
class Outcome:
    """What one evaluation did."""

    events: list[AlertEvent]
    failures: list[RuleFailure]

    @property
    def raised(self) -> list[Alert]:
        return [e.alert for e in self.events if e.kind is AlertEventKind.RAISED]

    @property
    def resolved(self) -> list[Alert]:
        return [e.alert for e in self.events if e.kind is AlertEventKind.RESOLVED]

    def only_raised(self) -> Alert:
        assert not self.failures, self.failures
        assert len(self.events) == 1 and len(self.raised) == 1, self.events
        return self.raised[0]


@dataclass
class Memory:
    """One user's facts (folded afresh on every look) and the open alerts of some rules."""

    rules: Sequence[Rule]
    facts: list[Fact] = field(default_factory=list)
    open_alerts: dict[str, Alert] = field(default_factory=dict)
    days_ahead: int = 7
    lapse_days_ahead: int = 14

    def add(self, entity_type: str, entity_id: str, *, source: str, valid: str = "2025-01-01",
            observed: str | None = None, supersedes: tuple[str, ...] = (),
            **attributes: Any) -> Fact:
        """Assert validated attributes of an entity, from source ``source``."""
        fact = make_fact(
            user_id=USER, entity_type=entity_type, entity_id=entity_id,
            attributes=validate_attributes(entity_type, attributes),
            valid_time=valid, observed_time=observed, provenance=(source,),
            supersedes=supersedes,
        )
        self.facts.append(fact)
        return fact

    def retract(self, entity_type: str, entity_id: str, *, source: str, valid: str) -> Fact:
        fact = make_fact(user_id=USER, entity_type=entity_type, entity_id=entity_id,
                         op=Op.RETRACT, valid_time=valid, provenance=(source,))
        self.facts.append(fact)
        return fact

    def state(self) -> UserState:
        return fold(self.facts).get(USER) or UserState(USER)

    def context(self, now: str) -> RuleContext:
        return RuleContext(at(now), days_ahead=self.days_ahead,
                           lapse_days_ahead=self.lapse_days_ahead)

    def run(self, now: str) -> Outcome:
        """Evaluate the rules over the current state at event time ``now``."""
        events, failures = evaluate(self.state(), self.rules, self.context(now), self.open_alerts)
        return Outcome(events, failures)

    def findings(self, now: str) -> list[Any]:
        """The raw findings of every rule (no alert bookkeeping)."""
        state, ctx = self.state(), self.context(now)
        return [f for r in self.rules for f in r.evaluate(state, ctx)]
