"""Helpers to test a memory: generated histories, fresh memories, and a reference resolver.

Like the testing modules of stream processors, this lets you check what a
memory answers against what it should answer, without a broker or a model::

    from uac import api
    from uac.testing import expected_entities, generate_history, memory

    records = generate_history("alice", 500, seed=7)
    settings = memory(tmp_path, records)
    got = api.query("alice", "SELECT count(*) FROM trips WHERE international",
                    settings=settings).scalar()
    trips = expected_entities(records, "alice")["trip"]
    assert got == sum(1 for t in trips if t["international"])

:func:`generate_history` makes a deterministic, realistic history (trips,
transactions, purchases, medications, appointments, events, contacts) that
includes later updates of earlier entities, stale values that must lose,
``supersedes`` corrections and retractions of duplicates.
:func:`expected_entities` is an independent, deliberately simple
implementation of the documented contradiction rule (it does not use the
fold), to compute expected answers from the observations themselves.

:class:`FakeChatServer` (with :class:`Reply`) is a scripted OpenAI-compatible chat server on
127.0.0.1 for testing extraction without a provider: point ``UAC_MODEL=openai/<name>`` and
``UAC_API_BASE`` at ``server.base_url``.

Everything here uses fixed dates: nothing reads the wall clock.
"""

from __future__ import annotations

import itertools
import json
import random
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeAlias

from uac import api
from uac.domains.catalog import get_type, validate_attributes
from uac.domains.facts import to_utc
from uac.errors import ValidationError
from uac.extraction.fake_server import FakeChatServer, Reply
from uac.settings import Settings

__all__ = [
    "FakeChatServer", "Observation", "Reply", "expected_entities", "generate_history", "memory",
    "observation_lines", "write_jsonl",
]

Observation: TypeAlias = dict[str, Any]
"""One observation in the JSON Lines format of :mod:`uac.streams.observations`."""

HOME_COUNTRY = "US"
DOMESTIC = (("New York", "US"), ("Chicago", "US"), ("Denver", "US"), ("Seattle", "US"),
            ("Austin", "US"), ("Boston", "US"))
ABROAD = (("Paris", "FR"), ("Lisbon", "PT"), ("Tokyo", "JP"), ("Berlin", "DE"),
          ("Mexico City", "MX"), ("Toronto", "CA"), ("Rome", "IT"), ("Seoul", "KR"))
MERCHANTS: dict[str, tuple[str, ...]] = {
    "groceries": ("Whole Foods", "Trader Joe's", "Safeway", "Amazon"),
    "dining": ("Chipotle", "Sushi Zen", "Blue Bottle", "Pizza Nova"),
    "transport": ("Uber", "Lyft", "Shell"),
    "utilities": ("PG&E", "Comcast"),
    "entertainment": ("Netflix", "AMC Theatres", "Spotify"),
    "health": ("CVS", "Walgreens"),
    "shopping": ("Amazon", "Target", "IKEA", "Best Buy"),
    "travel": ("Delta", "Airbnb", "Marriott"),
}
ACCOUNTS = ("checking", "credit card", "savings")
ITEMS = ("laptop", "headphones", "blender", "running shoes", "monitor", "coffee grinder",
         "backpack", "phone case", "desk lamp", "vacuum", "e-reader", "rain jacket")
SHOPS = ("Amazon", "Best Buy", "Target", "IKEA", "REI")
DRUGS = (("amoxicillin", "penicillin"), ("ibuprofen", "nsaid"), ("naproxen", "nsaid"),
         ("atorvastatin", "statin"), ("simvastatin", "statin"), ("lisinopril", "ace inhibitor"),
         ("metformin", "biguanide"), ("sertraline", "ssri"), ("omeprazole", "ppi"),
         ("cetirizine", "antihistamine"), ("azithromycin", "macrolide"),
         ("prednisone", "corticosteroid"))
DOCTORS = ("Dr. Okafor", "Dr. Lindqvist", "Dr. Alvarez", "Dr. Chen")
APPOINTMENTS = ("dentist checkup", "physio session", "GP visit", "eye exam", "dermatology")
CLINICS = ("Main St Clinic", "City Hospital", "Harbor Dental", "Northside Physio")
EVENTS = ("team offsite", "concert", "birthday dinner", "conference", "wedding", "book club",
          "yoga class", "parent meeting")
PLACES = ("downtown", "office", "home", "community center", "stadium")
PEOPLE = ("Ana Silva", "Ben Carter", "Chloe Dubois", "Dev Patel", "Emma Novak", "Farid Haddad",
          "Grace Kim", "Hugo Martin", "Ines Costa", "Jonas Berg", "Keiko Sato", "Liam Walsh",
          "Mia Rossi", "Noah Fischer", "Olivia Brown", "Pablo Ruiz", "Quinn Adams", "Rosa Lopez",
          "Sam Taylor", "Tara Singh", "Uma Reddy", "Victor Hugo", "Wen Li", "Yara Nasser")
RELATIONSHIPS = ("friend", "colleague", "sister", "brother", "doctor", "neighbour", "cousin")

_BASE_FIRST = ("trip_domestic", "trip_international", "transaction", "purchase", "medication",
               "appointment", "event", "contact")
_WEIGHTS: dict[str, int] = {
    "transaction": 46, "trip": 9, "purchase": 8, "medication": 4, "appointment": 6, "event": 7,
    "contact": 4, "trip_cost": 3, "trip_extension": 1, "trip_stale": 1, "tx_category": 3,
    "tx_date_fix": 2, "tx_duplicate": 2, "purchase_returned": 2, "purchase_price": 1,
    "med_stopped": 1, "appointment_location": 1, "contact_phone": 1,
}


@dataclass
class _Draft:
    """An observation before its observed time is fixed (records are sorted by it)."""

    record: Observation
    observed_on: date
    index: int


@dataclass
class _Generator:
    user_id: str
    rng: random.Random
    start: date
    days: int
    drafts: list[_Draft] = field(default_factory=list)
    trips: list[dict[str, Any]] = field(default_factory=list)
    transactions: list[dict[str, Any]] = field(default_factory=list)
    purchases: list[dict[str, Any]] = field(default_factory=list)
    medications: dict[str, dict[str, Any]] = field(default_factory=dict)
    appointments: list[dict[str, Any]] = field(default_factory=list)
    contacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: set[tuple[str, ...]] = field(default_factory=set)

    # -- plumbing --------------------------------------------------------------------------------
    def day(self) -> date:
        return self.start + timedelta(days=self.rng.randrange(self.days))

    def emit(self, etype: str, attributes: dict[str, Any], valid_on: date, *,
             observed_on: date | None = None, op: str = "assert", entity_id: str | None = None,
             supersedes: Sequence[str] = ()) -> str:
        index = len(self.drafts)
        source_id = f"{self.user_id}:{index:06d}:{etype}"
        record: Observation = {
            "user": self.user_id, "type": etype, "attributes": attributes,
            "valid_time": valid_on.isoformat(), "source_id": source_id,
        }
        if op != "assert":
            record["op"] = op
        if entity_id is not None:
            record["id"] = entity_id
        if supersedes:
            record["supersedes"] = list(supersedes)
        self.drafts.append(_Draft(record, observed_on or valid_on, index))
        return source_id

    def fresh(self, attempt: int, *key: str) -> bool:
        """Reserve a natural key; False if it is taken (draw again). After many attempts (a short
        span of days) a taken key is accepted: the record then updates that entity, as in life."""
        if key in self.keys and attempt < 50:
            return False
        self.keys.add(key)
        return True

    def money(self, low: int, high: int) -> float:
        """An amount with cents, drawn in [low, high] cents."""
        return self.rng.randint(low, high) / 100

    def slot(self, on: date) -> datetime:
        return datetime(on.year, on.month, on.day, self.rng.randint(8, 17),
                        self.rng.choice((0, 30)), tzinfo=UTC)

    # -- base records ----------------------------------------------------------------------------
    def trip(self, international: bool | None = None) -> None:
        abroad = self.rng.random() < 0.4 if international is None else international
        for attempt in itertools.count():
            destination, country = self.rng.choice(ABROAD if abroad else DOMESTIC)
            start = self.day()
            if self.fresh(attempt, "trip", destination, start.isoformat()):
                break
        end = start + timedelta(days=self.rng.randint(1, 14))
        cost = self.money(60_000, 500_000) if abroad else self.money(15_000, 150_000)
        attrs = {"destination": destination, "country": country, "start_date": start.isoformat(),
                 "end_date": end.isoformat(), "international": abroad,
                 "purpose": self.rng.choice(("business", "leisure", "family")), "cost": cost,
                 "currency": "USD"}
        self.emit("trip", attrs, start)
        self.trips.append({"attrs": attrs, "end": end})

    def transaction(self) -> None:
        category = self.rng.choice(sorted(MERCHANTS))
        roll = self.rng.random()
        if roll < 0.03:
            amount = 100.0  # exactly on the threshold: "over 100" must not count it
        elif roll < 0.12:
            amount = self.money(10_000, 150_000)
        else:
            amount = self.money(150, 12_000)
        on = self.day()
        entity_id = f"tx-{len(self.drafts):06d}"
        attrs = {"amount": amount, "currency": "USD", "date": on.isoformat(),
                 "category": category, "merchant": self.rng.choice(MERCHANTS[category]),
                 "account": self.rng.choice(ACCOUNTS)}
        source = self.emit("transaction", attrs, on, entity_id=entity_id)
        self.transactions.append({"id": entity_id, "attrs": attrs, "source": source,
                                  "on": on, "fixed": False})

    def purchase(self) -> None:
        for attempt in itertools.count():
            item, on = self.rng.choice(ITEMS), self.day()
            if self.fresh(attempt, "purchase", item, on.isoformat()):
                break
        attrs: dict[str, Any] = {"item": item, "price": self.money(999, 250_000), "currency": "USD",
                                 "purchased_on": on.isoformat(), "merchant": self.rng.choice(SHOPS),
                                 "return_by": (on + timedelta(days=30)).isoformat()}
        if self.rng.random() < 0.7:
            years = self.rng.choice((1, 2, 3))
            attrs["warranty_until"] = (on + timedelta(days=365 * years)).isoformat()
        self.emit("purchase", attrs, on)
        self.purchases.append({"attrs": attrs, "on": on})

    def medication(self) -> None:
        name, drug_class = self.rng.choice(DRUGS)
        on = self.day()
        attrs = {"name": name, "drug_class": drug_class, "prescribed_on": on.isoformat(),
                 "dose": f"{self.rng.choice((5, 10, 20, 250, 500))} mg",
                 "prescriber": self.rng.choice(DOCTORS), "status": "active"}
        self.emit("medication", attrs, on)
        self.medications.setdefault(name, {"on": on})

    def appointment(self) -> None:
        for attempt in itertools.count():
            title, start = self.rng.choice(APPOINTMENTS), self.slot(self.day())
            if self.fresh(attempt, "appointment", title, start.isoformat()):
                break
        end = start + timedelta(minutes=self.rng.choice((30, 45, 60)))
        attrs = {"title": title, "start": _z(start), "end": _z(end),
                 "provider": self.rng.choice(DOCTORS), "location": self.rng.choice(CLINICS)}
        self.emit("appointment", attrs, start.date())
        self.appointments.append({"attrs": attrs, "on": start.date()})

    def event(self) -> None:
        for attempt in itertools.count():
            title, start = self.rng.choice(EVENTS), self.slot(self.day())
            if self.fresh(attempt, "event", title, start.isoformat()):
                break
        end = start + timedelta(hours=self.rng.choice((1, 2, 3)))
        attrs = {"title": title, "start": _z(start), "end": _z(end),
                 "location": self.rng.choice(PLACES)}
        self.emit("event", attrs, start.date())

    def contact(self) -> None:
        name, on = self.rng.choice(PEOPLE), self.day()
        first, last = name.lower().split()
        attrs = {"name": name, "relationship": self.rng.choice(RELATIONSHIPS),
                 "phone": f"+1-555-{self.rng.randint(0, 9999):04d}",
                 "email": f"{first}.{last}@example.com",
                 "birthday": date(self.rng.randint(1950, 2005), self.rng.randint(1, 12),
                                  self.rng.randint(1, 28)).isoformat()}
        self.emit("contact", attrs, on)
        self.contacts.setdefault(name, {"on": on})

    # -- updates and corrections (return False when nothing fits yet) ----------------------------
    def trip_cost(self) -> bool:
        """The trip's cost, corrected after it ended (a later valid time wins)."""
        if not self.trips:
            return False
        trip = self.rng.choice(self.trips)
        attrs = trip["attrs"]
        key = {"destination": attrs["destination"], "start_date": attrs["start_date"]}
        cost = round(attrs["cost"] + self.money(-5_000, 20_000), 2)
        self.emit("trip", {**key, "cost": max(cost, 1.0)},
                  trip["end"] + timedelta(days=self.rng.randint(1, 20)))
        return True

    def trip_extension(self) -> bool:
        """The trip was extended on its last day."""
        if not self.trips:
            return False
        trip = self.rng.choice(self.trips)
        attrs = trip["attrs"]
        end = trip["end"] + timedelta(days=self.rng.randint(1, 5))
        self.emit("trip", {"destination": attrs["destination"], "start_date": attrs["start_date"],
                           "end_date": end.isoformat()}, trip["end"])
        trip["end"] = end
        return True

    def trip_stale(self) -> bool:
        """An early estimate that arrives late: learned later, but true earlier, so it loses."""
        if not self.trips:
            return False
        trip = self.rng.choice(self.trips)
        attrs = trip["attrs"]
        start = date.fromisoformat(attrs["start_date"])
        self.emit("trip", {"destination": attrs["destination"], "start_date": attrs["start_date"],
                           "cost": round(attrs["cost"] * 0.8, 2)},
                  start - timedelta(days=self.rng.randint(5, 60)),
                  observed_on=trip["end"] + timedelta(days=self.rng.randint(1, 30)))
        return True

    def tx_category(self) -> bool:
        """A transaction re-categorised later."""
        candidates = [t for t in self.transactions if not t.get("duplicate")]
        if not candidates:
            return False
        tx = self.rng.choice(candidates)
        self.emit("transaction", {"category": self.rng.choice(sorted(MERCHANTS))},
                  tx["on"] + timedelta(days=self.rng.randint(1, 40)), entity_id=tx["id"])
        return True

    def tx_date_fix(self) -> bool:
        """The bank's record had the wrong (too late) date and amount; a correction supersedes it.

        Without ``supersedes`` the wrong record would win (its valid time is later).
        """
        candidates = [t for t in self.transactions if not t["fixed"] and not t.get("duplicate")]
        if not candidates:
            return False
        tx = self.rng.choice(candidates)
        tx["fixed"] = True
        true_on = tx["on"] - timedelta(days=self.rng.randint(1, 9))
        amount = max(round(tx["attrs"]["amount"] + self.money(-500, 500), 2), 0.01)
        attrs = {**tx["attrs"], "date": true_on.isoformat(), "amount": amount}
        self.emit("transaction", attrs, true_on,
                  observed_on=tx["on"] + timedelta(days=self.rng.randint(1, 5)),
                  entity_id=tx["id"], supersedes=[tx["source"]])
        return True

    def tx_duplicate(self) -> bool:
        """A duplicate charge imported twice, retracted a few days later (two records)."""
        candidates = [t for t in self.transactions if not t.get("duplicate")]
        if not candidates:
            return False
        tx = self.rng.choice(candidates)
        entity_id = f"tx-{len(self.drafts):06d}-dup"
        self.emit("transaction", dict(tx["attrs"]), tx["on"], entity_id=entity_id)
        self.emit("transaction", {}, tx["on"] + timedelta(days=self.rng.randint(1, 10)),
                  op="retract", entity_id=entity_id)
        return True

    def purchase_returned(self) -> bool:
        if not self.purchases:
            return False
        item = self.rng.choice(self.purchases)
        attrs = item["attrs"]
        self.emit("purchase", {"item": attrs["item"], "purchased_on": attrs["purchased_on"],
                               "returned": True},
                  item["on"] + timedelta(days=self.rng.randint(1, 29)))
        return True

    def purchase_price(self) -> bool:
        """A price adjustment with the same valid time, learned later (observed time breaks the tie)."""
        if not self.purchases:
            return False
        item = self.rng.choice(self.purchases)
        attrs = item["attrs"]
        self.emit("purchase", {"item": attrs["item"], "purchased_on": attrs["purchased_on"],
                               "price": max(round(attrs["price"] - self.money(100, 5_000), 2), 1.0)},
                  item["on"], observed_on=item["on"] + timedelta(days=self.rng.randint(1, 10)))
        return True

    def med_stopped(self) -> bool:
        if not self.medications:
            return False
        name = self.rng.choice(sorted(self.medications))
        self.emit("medication", {"name": name, "status": "stopped"},
                  self.medications[name]["on"] + timedelta(days=self.rng.randint(10, 200)))
        return True

    def appointment_location(self) -> bool:
        if not self.appointments:
            return False
        appt = self.rng.choice(self.appointments)
        attrs = appt["attrs"]
        self.emit("appointment", {"title": attrs["title"], "start": attrs["start"],
                                  "location": self.rng.choice(CLINICS)},
                  appt["on"] + timedelta(days=self.rng.randint(0, 3)),
                  observed_on=appt["on"] + timedelta(days=self.rng.randint(4, 6)))
        return True

    def contact_phone(self) -> bool:
        if not self.contacts:
            return False
        name = self.rng.choice(sorted(self.contacts))
        self.emit("contact", {"name": name, "phone": f"+1-555-{self.rng.randint(0, 9999):04d}"},
                  self.contacts[name]["on"] + timedelta(days=self.rng.randint(1, 300)))
        return True

    # -- driver ----------------------------------------------------------------------------------
    def step(self, kind: str, remaining: int) -> None:
        if kind == "trip_domestic":
            self.trip(False)
        elif kind == "trip_international":
            self.trip(True)
        elif kind == "tx_duplicate" and remaining < 2:
            self.transaction()
        elif kind in ("transaction", "trip", "purchase", "medication", "appointment", "event",
                      "contact"):
            getattr(self, kind)()
        elif not getattr(self, kind)():
            self.transaction()

    def records(self) -> list[Observation]:
        """Fix observed times (unique, in observed order) and return the sorted records."""
        ordered = sorted(self.drafts, key=lambda d: (d.observed_on, d.index))
        out: list[Observation] = []
        per_day: dict[date, int] = {}
        for draft in ordered:
            n = per_day[draft.observed_on] = per_day.get(draft.observed_on, 0) + 1
            on = draft.observed_on
            observed = datetime(on.year, on.month, on.day, 8, tzinfo=UTC) + timedelta(seconds=7 * n)
            out.append({**draft.record, "observed_time": _z(observed)})
        return out


def _z(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def generate_history(user_id: str, n: int, seed: int, start: date = date(2023, 1, 1),
                     days: int = 730) -> list[Observation]:
    """A deterministic history of exactly ``n`` observations of ``user_id``, sorted by observed time.

    Base records fall on days in ``[start, start + days)``, each with
    ``valid_time`` its own date (a trip's start, a transaction's date, an
    appointment's day); updates and corrections come later. The mix:

    - trips, domestic and international (country, cost with cents, start and end dates);
      later cost corrections and extensions (later valid time wins), and stale early
      estimates that arrive late but lose (their valid time is earlier);
    - transactions (category, merchant, account, amount with cents, some exactly 100.00),
      always with an explicit ``id``; re-categorisations, date-and-amount corrections that
      ``supersedes`` the wrong record, and duplicates retracted a few days later;
    - purchases (price, merchant, return_by, often warranty_until); returns, and price
      adjustments with the same valid time but a later observed time;
    - medications (re-prescriptions of the same drug update it; some are stopped),
      appointments (locations change), events, contacts (phones change).

    Every record has a unique ``source_id`` and a unique ``observed_time``, so no two facts
    of one entity tie on (valid time, observed time): the fact-id tie-break never decides.
    The same arguments always give the same list (``random.Random(seed)``).
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if days < 1:
        raise ValueError("days must be >= 1")
    gen = _Generator(user_id, random.Random(seed), start, days)
    kinds = sorted(_WEIGHTS)
    weights = [_WEIGHTS[k] for k in kinds]
    first = 0
    while len(gen.drafts) < n:
        if first < len(_BASE_FIRST):
            kind = _BASE_FIRST[first]
            first += 1
        else:
            kind = gen.rng.choices(kinds, weights)[0]
        gen.step(kind, n - len(gen.drafts))
    return gen.records()


def observation_lines(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The JSON Lines text of ``records`` (keys sorted, one object per line)."""
    return [json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records]


def write_jsonl(records: Iterable[Mapping[str, Any]], path: Path | str) -> Path:
    """Write ``records`` as a JSON Lines file at ``path`` (for ``uac ingest``); return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", encoding="utf-8") as fh:
        fh.writelines(observation_lines(records))
    return target


def memory(tmp_path: Path, records: Iterable[Mapping[str, Any]], *, strict: bool = True,
           **settings_overrides: Any) -> Settings:
    """Ingest ``records`` into a fresh memory under ``tmp_path`` and return its settings.

    Each call makes a new data directory, so one ``tmp_path`` can hold several
    memories. ``settings_overrides`` are :class:`~uac.settings.Settings` fields
    (``window_facts=50``). With ``strict`` (the default) a rejected line raises
    :class:`~uac.errors.ValidationError` naming it, instead of passing silently.
    """
    tmp_path.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="memory-", dir=tmp_path))
    settings = Settings(data_dir=data_dir, **settings_overrides)
    summary = api.ingest(observation_lines(records), settings=settings)
    if strict and summary.rejected:
        raise ValidationError(f"{summary.rejected} observation(s) rejected: "
                              + "; ".join(summary.errors[:5]))
    return settings


# -- the reference resolver -------------------------------------------------------------------
def _entity_key(record: Mapping[str, Any], attributes: Mapping[str, Any]) -> tuple[str, ...]:
    if "id" in record:
        return ("id", str(record["id"]))
    etype = get_type(str(record["type"]))
    key = etype.key if etype is not None else ()
    if key and all(attributes.get(k) not in (None, "") for k in key):
        return ("key", *(str(attributes[k]).strip().lower() for k in key))
    return ("source", str(record["source_id"]))


def expected_entities(records: Iterable[Mapping[str, Any]], user_id: str
                      ) -> dict[str, list[dict[str, Any]]]:
    """The user's current entities by type, computed from observations by the documented rule.

    An independent reference, not the fold: observations whose ``source_id`` a
    correction names in ``supersedes`` are dropped; each entity (explicit ``id``,
    else its type's natural key, lower-cased) takes, attribute by attribute, the
    value of the latest assert (later valid time, then later observed time);
    a retraction removes every assert ordered before it. Values are coerced as
    the catalog does (dates ``YYYY-MM-DD``, datetimes UTC ``...Z``). Entities are
    listed in order of their natural key, attributes set to null are left out.

    Two facts of one entity with equal (valid time, observed time) are broken by
    fact id in uac; this reference refuses them (``ValueError``) rather than guess.
    It does not model uac's id normalisation (spaces to dashes, 80-character cut),
    so keys that differ only that way count as different entities here.
    """
    chosen = [r for r in records if r.get("user") == user_id]
    superseded = {s for r in chosen for s in r.get("supersedes", ())}
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[tuple[datetime, datetime], bool,
                                                         dict[str, Any]]]] = {}
    for r in chosen:
        if r["source_id"] in superseded:
            continue
        etype = str(r["type"])
        attrs = validate_attributes(etype, r["attributes"], where=str(r["source_id"]))
        valid = to_utc(str(r["valid_time"]))
        observed = to_utc(str(r.get("observed_time", r["valid_time"])))
        retract = r.get("op", "assert") == "retract"
        groups.setdefault((etype, _entity_key(r, attrs)), []).append(
            ((valid, observed), retract, attrs))
    out: dict[str, list[dict[str, Any]]] = {}
    for (etype, _), facts in sorted(groups.items()):
        facts.sort(key=lambda f: f[0])
        orders = [f[0] for f in facts]
        if len(set(orders)) != len(orders):
            raise ValueError(f"two facts of one {etype} tie on (valid time, observed time)")
        retracted_at = max((order for order, retract, _ in facts if retract), default=None)
        current: dict[str, Any] = {}
        exists = False
        for order, retract, attrs in facts:
            if retract or (retracted_at is not None and order <= retracted_at):
                continue
            current.update(attrs)
            exists = True
        if exists:
            out.setdefault(etype, []).append({k: v for k, v in current.items() if v is not None})
    return out
