"""A deterministic generator of realistic facts for the benchmarks.

Everything comes from one ``random.Random(seed)``: the same seed gives the same
facts, byte for byte, on every machine. No wall-clock time is read; event time
starts at :data:`EPOCH` and advances evenly over ``span`` across the records.

The mix follows what a personal memory fed by integrations looks like:
transactions dominate, then trips, purchases, calendar items, health records,
contacts, preferences, budgets and documents. Besides new entities, some facts
update an existing entity (a changed trip date, a stopped medication), some
retract one (a cancelled event) and a few correct an earlier observation by
superseding its source id. Entity ids come from each type's natural key, as
:func:`uac.streams.observations.parse_observation` derives them, and attribute
values are already in the catalog's canonical form (see :func:`check_sample`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from uac.domains.catalog import derive_entity_id, validate_attributes
from uac.domains.facts import Fact, Op, Tick, make_fact

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
"""Event time of the first generated record (fixed: no wall clock in the data)."""

MIX_DEFAULT: dict[str, float] = {
    "transaction": 0.60, "trip": 0.07, "purchase": 0.06, "event": 0.05, "deadline": 0.03,
    "contact": 0.03, "appointment": 0.02, "medication": 0.02, "preference": 0.02,
    "entity": 0.02, "payment_instruction": 0.01, "allergy": 0.005, "condition": 0.005,
    "contract": 0.005, "recurring_commitment": 0.005, "budget": 0.003, "account": 0.003,
    "passport": 0.002, "visa": 0.002,
}
"""Share of new entities per type in the default, many-users workload."""

MIX_QUERY: dict[str, float] = {
    "transaction": 0.75, "trip": 0.15, "purchase": 0.04, "event": 0.03, "deadline": 0.01,
    "contact": 0.01, "preference": 0.01,
}
"""Mostly transactions and trips: the one-user history the aggregate queries run over."""


@dataclass(frozen=True, slots=True)
class OpMix:
    """Shares of operations on existing entities; the rest of the facts create new entities."""

    update: float = 0.15
    retract: float = 0.02
    correct: float = 0.005


_CATEGORIES = ("groceries", "dining", "transport", "rent", "utilities", "entertainment", "health",
               "travel", "shopping", "subscriptions", "education", "gifts")
_MERCHANTS = ("Green Market", "Lupa", "Sushi Zen", "Metro Transit", "City Power", "Netflix",
              "Amazon", "Shell", "Bistro 9", "Pharmacy Plus", "Uber", "IKEA", "Apple",
              "Corner Cafe", "Bookshop", "Gym Club", "Airline Co", "Hotel Central")
_PLACES = (("Tokyo", "JP"), ("Paris", "FR"), ("Berlin", "DE"), ("New York", "US"),
           ("Chicago", "US"), ("Rome", "IT"), ("Lisbon", "PT"), ("Mexico City", "MX"),
           ("Toronto", "CA"), ("London", "GB"), ("Seoul", "KR"), ("Austin", "US"),
           ("Denver", "US"), ("Barcelona", "ES"), ("Sydney", "AU"), ("Boston", "US"))
_DRUGS = (("amoxicillin", "penicillin"), ("ibuprofen", "nsaid"), ("atorvastatin", "statin"),
          ("metformin", None), ("lisinopril", "ace inhibitor"), ("cephalexin", "cephalosporin"),
          ("sertraline", "ssri"), ("omeprazole", None), ("codeine", "opioid"),
          ("cetirizine", None))
_ALLERGENS = ("penicillin", "peanuts", "latex", "sulfa", "pollen", "aspirin", "shellfish", "codeine")
_ITEMS = ("headphones", "laptop", "running shoes", "coffee maker", "phone", "jacket", "monitor",
          "backpack", "blender", "watch", "camera", "desk chair")
_TITLES = ("dentist", "team meeting", "dinner with Sam", "yoga", "school pickup", "1:1 with boss",
           "car service", "concert", "haircut", "book club", "parents call", "flight check-in")
_NAMES = ("Sam", "Alex", "Priya", "Chen", "Maria", "Omar", "Lena", "Jonas", "Aiko", "Tomas",
          "Fatima", "Ravi", "Nora", "Diego", "Ines", "Kofi")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NATURAL_KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "trip": ("destination", "start_date"), "purchase": ("item", "purchased_on"),
    "event": ("title", "start"), "appointment": ("title", "start"), "deadline": ("title",),
    "contact": ("name",), "medication": ("name",), "preference": ("topic",),
    "payment_instruction": ("payee", "destination_account"), "allergy": ("substance",),
    "condition": ("name",), "contract": ("title",), "recurring_commitment": ("title",),
    "budget": ("category", "period"), "account": ("name",), "passport": ("country",),
    "visa": ("country", "valid_from"),
}


def _day(value: date) -> str:
    return value.isoformat()


def _moment(value: datetime) -> str:
    return value.replace(tzinfo=None).isoformat() + "Z"


@dataclass(slots=True)
class _User:
    """What the generator remembers about one user, to update and correct existing entities."""

    user_id: str
    serial: int = 0
    recent: dict[str, list[str]] = field(default_factory=dict)
    """Entity ids per type, most recent last (bounded)."""
    sources: list[tuple[str, str, str]] = field(default_factory=list)
    """(entity type, entity id, source id) of recent asserts, for corrections (bounded)."""


class FactGenerator:
    """Deterministic facts (and daily clock ticks) for ``users`` users over ``span`` of event time.

    ``records(total)`` yields ``total`` facts in event-time order, plus one
    :class:`~uac.domains.facts.Tick` per simulated day (at midnight) when ``ticks`` is set.
    """

    def __init__(self, seed: int, users: int | list[str], *, mix: Mapping[str, float] | None = None,
                 ops: OpMix | None = None, start: datetime = EPOCH,
                 span: timedelta = timedelta(days=365), memory: int = 48,
                 source_prefix: str = "src") -> None:
        self.rng = random.Random(seed)
        ids = users if isinstance(users, list) else [f"user-{i:05d}" for i in range(users)]
        self.users = [_User(u) for u in ids]
        weights = dict(mix or MIX_DEFAULT)
        self.types = list(weights)
        self.cum_weights: list[float] = []
        total = 0.0
        for t in self.types:
            total += weights[t]
            self.cum_weights.append(total)
        self.ops = ops or OpMix()
        self.start = start
        self.span = span
        self.memory = memory
        self.source_prefix = source_prefix
        self.last_time = start

    # -- the stream ----------------------------------------------------------------------------
    def records(self, total: int, *, ticks: bool = True) -> Iterator[Fact | Tick]:
        """``total`` facts in event-time order (and a tick at midnight of each simulated day,
        as a daily scheduler would send)."""
        step = self.span / max(total, 1)
        next_tick = datetime(self.start.year, self.start.month, self.start.day,
                             tzinfo=UTC) + timedelta(days=1)
        rng = self.rng
        for i in range(total):
            observed = self.start + step * i + timedelta(seconds=rng.random() * step.total_seconds())
            while ticks and observed >= next_tick:
                yield Tick(next_tick)
                next_tick += timedelta(days=1)
            user = self.users[min(int(rng.random() ** 1.3 * len(self.users)), len(self.users) - 1)]
            yield self.fact(user, observed)
            self.last_time = observed

    def facts(self, total: int) -> list[Fact]:
        """``total`` facts, no ticks, as a list."""
        return [r for r in self.records(total, ticks=False) if isinstance(r, Fact)]

    # -- one fact ------------------------------------------------------------------------------
    def fact(self, user: _User, observed: datetime) -> Fact:
        """The next fact of ``user``: a new entity, or an update/retraction/correction of one."""
        rng = self.rng
        roll = rng.random()
        ops = self.ops
        if roll < ops.update + ops.retract + ops.correct and user.sources:
            if roll < ops.correct:
                return self._correct(user, observed)
            etype = rng.choice(list(user.recent))
            eid = rng.choice(user.recent[etype])
            if roll < ops.correct + ops.retract:
                return self._emit(user, observed, etype, eid, Op.RETRACT, {}, observed)
            attrs = self._update_attrs(etype, observed)
            return self._emit(user, observed, etype, eid, Op.ASSERT, attrs, observed)
        etype = self.types[_pick(self.cum_weights, rng.random())]
        return self._create(user, observed, etype)

    def _create(self, user: _User, observed: datetime, etype: str) -> Fact:
        attrs, valid = self._attrs(etype, observed)
        source = self._source(user)
        eid = derive_entity_id(etype, attrs, source)
        return self._emit(user, observed, etype, eid, Op.ASSERT, attrs, valid, source)

    def _correct(self, user: _User, observed: datetime) -> Fact:
        """Re-assert an entity with a corrected value, superseding the earlier observation."""
        etype, eid, old_source = self.rng.choice(user.sources)
        attrs = self._update_attrs(etype, observed)
        return self._emit(user, observed, etype, eid, Op.ASSERT, attrs, observed,
                          supersedes=(old_source,))

    def _source(self, user: _User) -> str:
        user.serial += 1
        return f"{self.source_prefix}-{user.user_id}-{user.serial}"

    def _emit(self, user: _User, observed: datetime, etype: str, eid: str, op: Op,
              attrs: dict[str, Any], valid: datetime, source: str | None = None,
              supersedes: tuple[str, ...] = ()) -> Fact:
        source = source or self._source(user)
        fact = make_fact(user_id=user.user_id, entity_type=etype, entity_id=eid, op=op,
                         attributes=attrs, valid_time=valid, observed_time=observed,
                         provenance=(source,), supersedes=supersedes)
        if op is Op.ASSERT:
            recent = user.recent.setdefault(etype, [])
            if eid not in recent[-4:]:
                recent.append(eid)
                if len(recent) > self.memory:
                    del recent[0]
            user.sources.append((etype, eid, source))
            if len(user.sources) > self.memory:
                del user.sources[0]
        return fact

    # -- attributes ----------------------------------------------------------------------------
    def _update_attrs(self, etype: str, observed: datetime) -> dict[str, Any]:
        """One or two non-key attributes of a fresh value for ``etype`` (an update)."""
        attrs, _ = self._attrs(etype, observed)
        keys = [k for k in attrs if k not in _NATURAL_KEY_FIELDS.get(etype, ())]
        if not keys:
            return attrs
        chosen = self.rng.sample(keys, min(len(keys), 1 + int(self.rng.random() < 0.3)))
        return {k: attrs[k] for k in sorted(chosen)}

    def _attrs(self, etype: str, now: datetime) -> tuple[dict[str, Any], datetime]:
        """Attributes of a new ``etype`` entity observed at ``now``, and its valid time."""
        rng = self.rng
        today = now.date()
        valid = now - timedelta(minutes=rng.randrange(0, 180))
        if etype == "transaction":
            when = today - timedelta(days=rng.randrange(0, 3))
            currency = "USD" if rng.random() < 0.8 else rng.choice(("EUR", "GBP"))
            attrs: dict[str, Any] = {
                "amount": round(rng.lognormvariate(3.2, 1.0), 2) * (-1 if rng.random() < 0.05 else 1),
                "currency": currency, "date": _day(when), "category": rng.choice(_CATEGORIES),
                "merchant": rng.choice(_MERCHANTS),
                "account": rng.choice(("checking", "credit card", "savings"))}
            return attrs, datetime(when.year, when.month, when.day, tzinfo=UTC)
        if etype == "trip":
            place, country = rng.choice(_PLACES)
            start = today + timedelta(days=rng.randrange(3, 150))
            return {"destination": place, "country": country, "start_date": _day(start),
                    "end_date": _day(start + timedelta(days=rng.randrange(1, 21))),
                    "international": country != "US", "purpose": rng.choice(("leisure", "business")),
                    "cost": float(rng.randrange(150, 4000)), "currency": "USD"}, valid
        if etype == "purchase":
            return {"item": rng.choice(_ITEMS), "price": round(rng.uniform(10, 1500), 2),
                    "currency": "USD", "purchased_on": _day(today), "merchant": rng.choice(_MERCHANTS),
                    "return_by": _day(today + timedelta(days=30)),
                    "warranty_until": _day(today + timedelta(days=rng.choice((365, 730)))),
                    "returned": False}, valid
        if etype in ("event", "appointment"):
            start = datetime(today.year, today.month, today.day, tzinfo=UTC) + timedelta(
                days=rng.randrange(1, 60), hours=rng.randrange(7, 21), minutes=rng.choice((0, 30)))
            attrs = {"title": rng.choice(_TITLES), "start": _moment(start),
                     "end": _moment(start + timedelta(minutes=rng.choice((30, 60, 90, 120)))),
                     "location": rng.choice(_MERCHANTS)}
            if etype == "appointment":
                attrs["provider"] = "Dr. " + rng.choice(_NAMES)
            return attrs, valid
        if etype == "deadline":
            return {"title": f"{rng.choice(('file', 'pay', 'renew', 'submit'))} "
                             f"{rng.choice(('taxes', 'insurance', 'report', 'form', 'invoice'))} "
                             f"#{rng.randrange(10_000)}",
                    "due": _day(today + timedelta(days=rng.randrange(1, 60))), "done": False}, valid
        if etype == "medication":
            name, klass = rng.choice(_DRUGS)
            attrs = {"name": name, "dose": f"{rng.choice((5, 10, 20, 250, 500))} mg",
                     "prescribed_on": _day(today), "prescriber": "Dr. " + rng.choice(_NAMES),
                     "status": "active" if rng.random() < 0.8 else "stopped"}
            if klass:
                attrs["drug_class"] = klass
            return attrs, valid
        if etype == "allergy":
            return {"substance": rng.choice(_ALLERGENS), "reaction": rng.choice(("hives", "rash")),
                    "severity": rng.choice(("mild", "moderate", "severe")),
                    "noted_on": _day(today)}, valid
        if etype == "contact":
            name = f"{rng.choice(_NAMES)} {rng.choice(_NAMES)}son"
            return {"name": name, "relationship": rng.choice(("friend", "colleague", "sister")),
                    "phone": f"+1-555-{rng.randrange(10_000):04d}",
                    "email": f"{name.split()[0].lower()}@example.com"}, valid
        if etype == "preference":
            return {"topic": rng.choice(("seat", "cuisine", "airline", "hotel", "music")),
                    "value": rng.choice(("aisle", "vegetarian", "window", "quiet", "jazz")),
                    "sentiment": rng.choice(("likes", "dislikes", "needs"))}, valid
        if etype == "payment_instruction":
            return {"payee": rng.choice(("Landlord LLC", "City Power", "Gym Club", "School")),
                    "destination_account": f"DE89 3704 0044 {rng.randrange(10_000):04d}",
                    "amount": float(rng.randrange(20, 2000)), "currency": "EUR"}, valid
        if etype == "budget":
            return {"category": rng.choice(_CATEGORIES[:4]), "limit": float(rng.randrange(200, 3000)),
                    "currency": "USD", "period": "month"}, valid
        if etype == "passport":
            return {"country": rng.choice(("US", "DE", "FR")), "number": f"X{rng.randrange(10**7)}",
                    "expiry_date": _day(today + timedelta(days=rng.randrange(30, 3650)))}, valid
        if etype == "visa":
            start = today + timedelta(days=rng.randrange(0, 90))
            return {"country": rng.choice(_PLACES)[1], "entries": rng.choice(("single", "multiple")),
                    "valid_from": _day(start), "valid_until": _day(start + timedelta(days=90))}, valid
        if etype == "contract":
            return {"title": f"{rng.choice(('lease', 'phone plan', 'gym', 'insurance'))} "
                             f"{rng.randrange(100)}", "kind": rng.choice(("lease", "subscription")),
                    "end_date": _day(today + timedelta(days=rng.randrange(30, 400))),
                    "notice_days": rng.choice((14, 30, 60, 90)),
                    "counterparty": rng.choice(_MERCHANTS), "notice_given": False}, valid
        if etype == "condition":
            return {"name": rng.choice(("asthma", "hypertension", "migraine", "diabetes")),
                    "diagnosed_on": _day(today), "status": "active"}, valid
        if etype == "recurring_commitment":
            hour = rng.randrange(7, 20)
            return {"title": f"{rng.choice(_TITLES)} weekly", "weekday": rng.choice(_WEEKDAYS),
                    "start_time": f"{hour:02d}:00", "end_time": f"{hour + 1:02d}:00",
                    "starts_on": _day(today)}, valid
        if etype == "account":
            return {"name": rng.choice(("checking", "savings", "credit card")),
                    "institution": rng.choice(("First Bank", "Credit Union", "Neo Bank")),
                    "kind": rng.choice(("checking", "savings", "credit"))}, valid
        return {"kind": rng.choice(("note", "goal", "pet", "vehicle")),
                "name": f"thing {rng.randrange(1000)}", "detail": rng.choice(_TITLES)}, valid


def _pick(cumulative: list[float], roll: float) -> int:
    """Index of the bucket ``roll`` (in [0, 1)) falls into, given cumulative weights."""
    target = roll * cumulative[-1]
    for index, bound in enumerate(cumulative):
        if target < bound:
            return index
    return len(cumulative) - 1


def check_sample(facts: list[Fact]) -> None:
    """Raise AssertionError unless the facts' attributes are already in canonical form
    (what :func:`uac.domains.catalog.validate_attributes` would make of them)."""
    for fact in facts:
        attrs = dict(fact.attributes)
        assert validate_attributes(fact.entity_type, attrs) == attrs, (fact.entity_type, attrs)
