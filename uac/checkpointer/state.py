"""Typed user state: what the fold produces and rules read. Pure: no I/O.

An entity keeps every fact about it (its bitemporal history) and the current
attribute values, resolved by the contradiction rule: among facts that are not
superseded, a retraction removes everything ordered before it, and each
attribute takes the value of the latest assert (later valid time, then later
observed time, then larger fact id). An attribute set to ``null`` is unset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from uac.domains.catalog import build_model
from uac.domains.facts import Fact, JsonValue, Op, canonical_json, iso

OrderKey = tuple[datetime, datetime, str]
EntityKey = tuple[str, str]


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
        return (self.entity_type, self.entity_id)


class StateView(Protocol):
    """What a rule reads: a user's current entities (all of them, or one rule group's)."""

    @property
    def user_id(self) -> str: ...

    @property
    def group(self) -> str | None:
        """The rule group being evaluated; None for the whole state."""
        ...

    def entity(self, entity_type: str, entity_id: str) -> EntityView | None: ...

    def of_type(self, entity_type: str) -> list[EntityView]: ...


@dataclass(slots=True)
class EntityState:
    """One entity's facts (all of them, superseded too) and its resolved current value."""

    entity_type: str
    entity_id: str
    facts: dict[str, Fact] = field(default_factory=dict)
    winners: dict[str, Fact] = field(default_factory=dict)
    """Attribute name -> the fact whose value it currently has."""
    retracted_at: OrderKey | None = None
    exists: bool = False
    _view: EntityView | None = None

    @property
    def attributes(self) -> dict[str, JsonValue]:
        """Current attribute values (unset attributes omitted)."""
        return {k: v for k, f in sorted(self.winners.items())
                if (v := f.attributes[k]) is not None}

    def current_values(self) -> dict[str, JsonValue]:
        """Current attribute values, unordered (cheaper than :attr:`attributes`)."""
        return {k: v for k, f in self.winners.items() if (v := f.attributes[k]) is not None}

    def live_fact_ids(self) -> tuple[str, ...]:
        """Ids of the facts the current value comes from, in order."""
        return tuple(sorted({f.fact_id for f in self.winners.values()}))

    def view(self) -> EntityView:
        if self._view is None:
            ids = self.live_fact_ids()
            sources = sorted({p for fid in ids for p in self.facts[fid].provenance})
            attrs = self.attributes
            self._view = EntityView(self.entity_type, self.entity_id, attrs,
                                    build_model(self.entity_type, attrs), ids, tuple(sources))
        return self._view

    def apply_assert(self, fact: Fact) -> None:
        """Fast path: fold one live assert into the winners."""
        key = None
        if self.retracted_at is not None:
            key = fact.order_key
            if key <= self.retracted_at:
                return
        winners = self.winners
        if not winners:
            self.winners = dict.fromkeys(fact.attributes, fact)
        else:
            key = key or fact.order_key
            for name in fact.attributes:
                current = winners.get(name)
                if current is None or key > current.order_key:
                    winners[name] = fact
        self.exists = True
        self._view = None

    def resolve(self, is_superseded: Any) -> None:
        """Recompute the current value from all facts (after a retraction or a supersession)."""
        live = [f for f in self.facts.values() if not is_superseded(f)]
        retracts = [f.order_key for f in live if f.op is Op.RETRACT]
        self.retracted_at = max(retracts) if retracts else None
        self.winners = {}
        self.exists = False
        for fact in sorted((f for f in live if f.op is Op.ASSERT), key=lambda f: f.order_key):
            self.apply_assert(fact)
        self._view = None

    def snapshot(self) -> dict[str, JsonValue]:
        """A canonical, JSON-ready description: current value plus full history."""
        return {
            "entity_type": self.entity_type,
            "entity_id": self.entity_id,
            "exists": self.exists,
            "attributes": self.attributes if self.exists else {},
            "history": [
                [f.fact_id, f.op.value, iso(f.valid_time), iso(f.observed_time)]
                for f in sorted(self.facts.values(), key=lambda f: f.order_key)
            ],
        }


@dataclass(slots=True)
class UserState:
    """All entities of one user plus the set of superseded references."""

    user_id: str
    entities: dict[EntityKey, EntityState] = field(default_factory=dict)
    superseded: dict[str, set[str]] = field(default_factory=dict)
    fact_ids: dict[str, EntityKey] = field(default_factory=dict)
    """Every fact id of the user -> the entity it is about."""
    sources: dict[str, tuple[EntityKey, ...]] = field(default_factory=dict)
    """Every provenance id -> the entities its facts are about (to apply corrections fast)."""
    by_type: dict[str, dict[str, EntityState]] = field(default_factory=dict)
    _views: dict[str, list[EntityView]] = field(default_factory=dict)

    @property
    def group(self) -> str | None:
        """None: the whole state (see :class:`StateView`)."""
        return None

    def add_entity(self, entity: EntityState) -> None:
        self.entities[(entity.entity_type, entity.entity_id)] = entity
        self.by_type.setdefault(entity.entity_type, {})[entity.entity_id] = entity

    def touched(self, entity_type: str | None = None) -> None:
        """Forget cached views of a type (of every type when None) after a change."""
        if entity_type is None:
            self._views.clear()
        else:
            self._views.pop(entity_type, None)

    def is_superseded(self, fact: Fact) -> bool:
        sup = self.superseded
        if not sup:
            return False
        return fact.fact_id in sup or any(p in sup for p in fact.provenance)

    def entity(self, entity_type: str, entity_id: str) -> EntityView | None:
        """The current entity, or None if it does not exist (now)."""
        state = self.entities.get((entity_type, entity_id))
        return state.view() if state is not None and state.exists else None

    def of_type(self, entity_type: str) -> list[EntityView]:
        """Every current entity of a type, ordered by id (a cached list: do not mutate it)."""
        views = self._views.get(entity_type)
        if views is None:
            members = self.by_type.get(entity_type, {})
            views = [members[i].view() for i in sorted(members) if members[i].exists]
            self._views[entity_type] = views
        return views

    def current(self) -> Iterator[EntityView]:
        """Every current entity, ordered by (type, id)."""
        for _, state in sorted(self.entities.items()):
            if state.exists:
                yield state.view()

    def all_facts(self) -> Iterable[Fact]:
        for state in self.entities.values():
            yield from state.facts.values()

    def fact(self, fact_id: str) -> Fact | None:
        key = self.fact_ids.get(fact_id)
        return self.entities[key].facts[fact_id] if key is not None else None

    def entities_citing(self, refs: Iterable[str]) -> list[EntityState]:
        """The entities holding a fact whose id or provenance is one of ``refs``."""
        keys: set[EntityKey] = set()
        for ref in refs:
            key = self.fact_ids.get(ref)
            if key is not None:
                keys.add(key)
            keys.update(self.sources.get(ref, ()))
        return [self.entities[k] for k in sorted(keys)]

    def snapshot(self) -> dict[str, JsonValue]:
        return {
            "user_id": self.user_id,
            "entities": [s.snapshot() for _, s in sorted(self.entities.items())],
            "superseded": {k: sorted(v) for k, v in sorted(self.superseded.items())},
        }

    def snapshot_bytes(self) -> bytes:
        """Canonical bytes of the whole user state: equal states give equal bytes."""
        return canonical_json(self.snapshot())
