"""The tiny rule runtime an exported project vendors as ``constraints/_runtime.py``.

This module is copied byte for byte into every export, so it imports only the
standard library. It re-implements the small surface the built-in rules use:
:class:`Finding`, :class:`RuleContext`, :class:`Severity`, the :func:`rule`
decorator and :class:`Rule`, and a :class:`State` (alias ``UserState``) whose
``of_type``/``entity`` return :class:`EntityView` objects built from the typed
state in ``domains/``. :func:`run_rules` evaluates rules the way uac does:
findings are checked, a subject counts once per rule, a crash is a failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any, TypeAlias

JsonValue: TypeAlias = Any
"""A JSON-compatible value: str, int, float, bool, None, list or dict of those."""
EntityKey = tuple[str, str]


class Severity(StrEnum):
    """How urgent a finding is."""

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
    """What :meth:`recheck_at` was told (uac uses it to skip clock ticks; unused here)."""

    @property
    def today(self) -> date:
        """The UTC date of ``now``."""
        return self.now.date()

    def recheck_at(self, when: datetime | None) -> None:
        """A time-based rule's hint of when its findings can next change with time alone."""
        self.rechecks.append(when)


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a rule noticed; ``subject`` identifies it (one alert per rule and subject)."""

    subject: str
    message: str
    severity: Severity = Severity.WARNING
    evidence: tuple[EntityKey, ...] = ()
    details: Mapping[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EntityView:
    """A read-only view of one current entity: ids, attributes and the typed model object."""

    entity_type: str
    entity_id: str
    attributes: dict[str, JsonValue]
    model: Any
    fact_ids: tuple[str, ...]
    sources: tuple[str, ...]

    @property
    def key(self) -> EntityKey:
        """``(entity_type, entity_id)``."""
        return (self.entity_type, self.entity_id)


class State:
    """All current entities of one user, read the way uac's ``UserState`` is read."""

    group: str | None = None
    """Rules grouped with ``group_by`` see one group at a time in uac; here, everything."""

    def __init__(self, user_id: str, views: Iterable[EntityView]) -> None:
        self.user_id = user_id
        self._views = {view.key: view for view in sorted(views, key=lambda v: v.key)}

    def entity(self, entity_type: str, entity_id: str) -> EntityView | None:
        """The entity, or None if there is none."""
        return self._views.get((entity_type, entity_id))

    def of_type(self, entity_type: str) -> list[EntityView]:
        """Every entity of a type, ordered by id."""
        return [view for (t, _), view in self._views.items() if t == entity_type]

    def current(self) -> Iterator[EntityView]:
        """Every entity, ordered by (type, id)."""
        yield from self._views.values()

    @classmethod
    def from_domains(
        cls,
        user_id: str,
        state: Mapping[str, Mapping[str, Any]],
        provenance: Mapping[str, Mapping[str, Mapping[str, tuple[str, ...]]]],
        extra: Mapping[str, Mapping[str, Mapping[str, JsonValue]]],
    ) -> State:
        """Build the state from ``domains.STATE``, ``PROVENANCE`` and ``EXTRA``."""
        views = []
        for entity_type, models in state.items():
            for entity_id, model in models.items():
                prov = provenance.get(entity_type, {}).get(entity_id, {})
                more = extra.get(entity_type, {}).get(entity_id, {})
                views.append(EntityView(
                    entity_type, entity_id, attributes_of(model, more), model,
                    tuple(prov.get("fact_ids", ())), tuple(prov.get("sources", ()))))
        return cls(user_id, views)


UserState = State
StateView = State
EVERY_GROUP = "*"
"""``group_by``'s "in every group" key (uac evaluates rule groups incrementally)."""


def json_value(value: Any) -> JsonValue:
    """A model value in its JSON form: dates ISO text, datetimes UTC with ``Z``, tuples lists."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [json_value(v) for v in value]
    return value


def attributes_of(model: Any, extra: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """An entity's attributes: the model's set fields (a dict field is merged in), then
    ``extra`` (attributes the model has no field for), sorted by name."""
    out: dict[str, JsonValue] = {}
    for spec in dataclasses.fields(model):
        value = getattr(model, spec.name)
        if value is None:
            continue
        if isinstance(value, dict):
            out.update(value)
        else:
            out[spec.name] = json_value(value)
    out.update(extra)
    return dict(sorted(out.items()))


RuleFunction = Callable[..., Iterable[Finding]]
"""A rule's function: ``(state, ctx) -> findings``."""


@dataclass(frozen=True, slots=True)
class Rule:
    """A named rule: what it reads, whether clock ticks wake it, and the function itself."""

    rule_id: str
    reads: frozenset[str]
    evaluate: RuleFunction
    time_based: bool = False
    description: str = ""
    requires: frozenset[str] = frozenset()
    """The rule has nothing to say without an entity of one of these types (empty: ``reads``)."""
    group_by: Callable[[EntityView], Iterable[str]] | None = None
    """Which independent groups an entity belongs to (uac evaluates groups incrementally)."""

    @property
    def anchors(self) -> frozenset[str]:
        """The types a user must have for this rule to be worth running."""
        return self.requires or self.reads

    def wants(self, changed_types: Iterable[str], tick: bool) -> bool:
        """Should this rule run for a change of ``changed_types`` (and/or a clock tick)?"""
        return (tick and self.time_based) or not self.reads.isdisjoint(changed_types)


def rule(
    rule_id: str, *, reads: Iterable[str], time_based: bool = False,
    requires: Iterable[str] = (), group_by: Callable[[EntityView], Iterable[str]] | None = None,
) -> Callable[[RuleFunction], Rule]:
    """Decorator turning a function ``(state, ctx) -> findings`` into a :class:`Rule`."""

    def wrap(fn: RuleFunction) -> Rule:
        doc = (fn.__doc__ or "").strip()
        return Rule(rule_id, frozenset(reads), fn, time_based, doc.splitlines()[0] if doc else "",
                    frozenset(requires), group_by)

    return wrap


@dataclass(frozen=True, slots=True)
class Outcome:
    """What running rules gave: (rule id, finding) pairs and (rule id, reason) failures."""

    findings: list[tuple[str, Finding]]
    failures: list[tuple[str, str]]


def run_rules(rules: Iterable[Rule], state: State, ctx: RuleContext) -> Outcome:
    """Run every rule; keep the first finding per (rule, subject); a crash is a failure.

    Findings come back sorted by (subject, rule id).
    """
    findings: list[tuple[str, Finding]] = []
    failures: list[tuple[str, str]] = []
    for item in rules:
        ctx.rechecks.clear()
        try:
            found = list(item.evaluate(state, ctx))
            for finding in found:
                if not isinstance(finding, Finding):
                    raise TypeError(f"returned {type(finding).__name__}, not a Finding")
        except Exception as exc:  # a rule is code; its failure is data
            failures.append((item.rule_id, f"{type(exc).__name__}: {exc}"))
            continue
        seen: set[str] = set()
        for finding in found:
            if finding.subject not in seen:
                seen.add(finding.subject)
                findings.append((item.rule_id, finding))
    findings.sort(key=lambda pair: (pair[1].subject, pair[0]))
    return Outcome(findings, failures)


__all__ = [
    "EVERY_GROUP", "EntityKey", "EntityView", "Finding", "JsonValue", "Outcome", "Rule",
    "RuleContext", "RuleFunction", "Severity", "State", "StateView", "UserState", "attributes_of",
    "json_value", "rule", "run_rules",
]
