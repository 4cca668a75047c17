"""The fold: facts in, typed user state out. Deterministic, idempotent, order-independent.

Applying a fact twice equals applying it once (facts are keyed by id); applying
the same set of facts in any order gives the same state (the current value is a
function of the set, resolved by the contradiction rule in :mod:`.state`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

from uac.checkpointer.state import EntityKey, EntityState, UserState
from uac.domains.facts import Fact, Op

_BULK_THRESHOLDS = (100_000, 50, 1000)
_ASSERT = Op.ASSERT


@contextmanager
def bulk_gc() -> Iterator[None]:
    """Collect garbage rarely while folding (restored afterwards).

    Folded state is many long-lived, acyclic objects; with the default thresholds the
    collector keeps walking them and takes half of the fold's time. Nothing it would
    free is left behind: references still free every object, and the thresholds come
    back when the block ends.
    """
    previous = gc.get_threshold()
    if previous == _BULK_THRESHOLDS:  # already inside: restoring on exit would collect now
        yield
        return
    gc.set_threshold(*_BULK_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


class ChangeKind(StrEnum):
    """What a window did to an entity."""

    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"
    HISTORY = "history"
    """New facts only changed history (e.g. an older value), not the current value."""


class EntityChange(NamedTuple):
    """One entity's net change over a window (a named tuple: windows make many of them)."""

    entity_type: str
    entity_id: str
    kind: ChangeKind


def _cite(sources: dict[str, tuple[EntityKey, ...]], key: EntityKey, refs: tuple[str, ...]) -> None:
    """Record that each provenance id in ``refs`` has a fact about the entity ``key``."""
    for ref in refs:
        known = sources.get(ref)
        if known is None:
            sources[ref] = (key,)
        elif key not in known:
            sources[ref] = (*known, key)


def apply_fact(user: UserState, fact: Fact) -> EntityKey | None:
    """Fold one fact into ``user`` in place. Returns the touched entity key, or None if a duplicate.

    The caller compares before/after values to classify changes (see :func:`fold_window`).
    """
    fid = fact.fact_id
    fact_ids = user.fact_ids
    if fid in fact_ids:
        return None
    key = (fact.entity_type, fact.entity_id)
    fact_ids[fid] = key
    _cite(user.sources, key, fact.provenance)
    entity = user.entities.get(key)
    if entity is None:
        entity = EntityState(fact.entity_type, fact.entity_id)
        user.add_entity(entity)
    entity.facts[fid] = fact
    if user._views:
        user.touched(fact.entity_type)
    if fact.supersedes:
        user.touched()
        new_refs = [r for r in fact.supersedes if r not in user.superseded]
        for ref in fact.supersedes:
            user.superseded.setdefault(ref, set()).add(fid)
        for other in user.entities_citing(new_refs):
            other.resolve(user.is_superseded)
    if user.superseded and user.is_superseded(fact):
        return key
    if fact.op is Op.ASSERT:
        entity.apply_assert(fact)
    else:
        entity.resolve(user.is_superseded)
    return key


_Fingerprint = tuple[bool, dict[str, Fact]]


_ABSENT: _Fingerprint = (False, {})


def _fingerprint(entity: EntityState | None) -> _Fingerprint:
    """Whether the entity exists, and which fact each attribute's value comes from."""
    if entity is None or not entity.exists:
        return _ABSENT
    return (True, dict(entity.winners))


def _values_changed(before: dict[str, Fact], entity: EntityState) -> bool:
    after = entity.winners
    if len(after) == len(before) and all(after.get(k) is f for k, f in before.items()):
        return False  # the same facts supply every value
    old = {k: v for k, f in before.items() if (v := f.attributes[k]) is not None}
    return old != entity.current_values()


def fold_window(
    states: dict[str, UserState], facts: Iterable[Fact]
) -> dict[str, list[EntityChange]]:
    """Fold a window of facts into ``states`` (created on demand); return the changes per user.

    Each touched entity appears once with its net change over the whole window.
    """
    with bulk_gc():
        return _fold_window(states, facts)


def _fold_window(
    states: dict[str, UserState], facts: Iterable[Fact]
) -> dict[str, list[EntityChange]]:
    before: dict[str, dict[EntityKey, _Fingerprint]] = {}
    state_of, seen_of = states.get, before.get
    for fact in facts:
        user_id = fact.user_id
        user = state_of(user_id)
        if user is None:
            user = states[user_id] = UserState(user_id)
        seen = seen_of(user_id)
        if seen is None:
            seen = before[user_id] = {}
        key = (fact.entity_type, fact.entity_id)
        entity = user.entities.get(key)
        if entity is None and fact.op is _ASSERT and not fact.supersedes and not user.superseded:
            if _create(user, key, fact) and key not in seen:  # the common case: a new entity
                seen[key] = _ABSENT
            continue
        if key not in seen:  # _fingerprint, inlined: this loop is the hot path
            seen[key] = (True, dict(entity.winners)) if entity is not None and entity.exists \
                else _ABSENT
        if fact.supersedes:  # a supersession may change other entities too
            for other in user.entities_citing(fact.supersedes):
                seen.setdefault((other.entity_type, other.entity_id), _fingerprint(other))
        apply_fact(user, fact)
    return {user_id: _classify(states[user_id], seen) for user_id, seen in before.items()}


def _create(user: UserState, key: EntityKey, fact: Fact) -> bool:
    """:func:`apply_fact` for a live assert about an entity the user does not have yet (nothing is
    superseded, nothing to resolve): the entity is made with its value at once. False for a
    duplicate fact."""
    fid = fact.fact_id
    fact_ids = user.fact_ids
    if fid in fact_ids:
        return False
    fact_ids[fid] = key
    _cite(user.sources, key, fact.provenance)
    user.add_entity(EntityState(key[0], key[1], {fid: fact}, dict.fromkeys(fact.attributes, fact),
                                None, True))
    if user._views:
        user.touched(key[0])
    return True


def _classify(user: UserState, seen: dict[EntityKey, _Fingerprint]) -> list[EntityChange]:
    """Each touched entity's net change, from its fingerprint before the window (in key order)."""
    created, deleted, updated, history = (ChangeKind.CREATED, ChangeKind.DELETED,
                                          ChangeKind.UPDATED, ChangeKind.HISTORY)
    entities = user.entities
    out: list[EntityChange] = []
    append, new = out.append, tuple.__new__  # a named tuple made without its __new__'s extra call
    for key in sorted(seen) if len(seen) > 1 else seen:
        existed, values = seen[key]
        entity = entities.get(key)
        exists = entity is not None and entity.exists
        if exists != existed:
            kind = created if exists else deleted
        elif exists and entity is not None and _values_changed(values, entity):
            kind = updated
        else:
            kind = history
        append(new(EntityChange, (key[0], key[1], kind)))
    return out


def fold(facts: Iterable[Fact], states: dict[str, UserState] | None = None) -> dict[str, UserState]:
    """Fold facts into per-user states (a new dict unless ``states`` is given)."""
    states = {} if states is None else states
    with bulk_gc():
        for fact in facts:
            user = states.get(fact.user_id)
            if user is None:
                user = states[fact.user_id] = UserState(fact.user_id)
            apply_fact(user, fact)
    return states


def as_of(
    user: UserState, *, known_at: datetime | None = None, valid_at: datetime | None = None
) -> UserState:
    """What we believed about the user as of ``known_at`` (observed time), about the world at
    ``valid_at`` (valid time); both bounds are inclusive. Superseded values stay queryable."""
    chosen = [
        f for f in user.all_facts()
        if (known_at is None or f.observed_time <= known_at)
        and (valid_at is None or f.valid_time <= valid_at)
    ]
    chosen.sort(key=lambda f: f.order_key)
    return fold(chosen)[user.user_id] if chosen else UserState(user.user_id)


def states_equal(a: Mapping[str, UserState], b: Mapping[str, UserState]) -> bool:
    """Byte-for-byte equality of two sets of user states."""
    return sorted(a) == sorted(b) and all(a[u].snapshot_bytes() == b[u].snapshot_bytes() for u in a)
