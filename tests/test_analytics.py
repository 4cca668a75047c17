"""Analytical questions are one computation over typed state, answered exactly through `uac query`.

Each question is a pair: SQL over the typed tables, and an independent Python
computation of the answer from the generated observations themselves
(:func:`uac.testing.expected_entities` resolves updates and corrections by the
documented rule, without the fold). They run over generated histories of 20,
200, 1,000 and 5,000 records, each ingested once per module.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from uac import api
from uac.checkpointer.duckdb_store import DuckDBStateStore
from uac.errors import QueryError, ValidationError
from uac.settings import Settings
from uac.testing import (
    Observation,
    expected_entities,
    generate_history,
    memory,
    observation_lines,
    write_jsonl,
)

USER = "alice"
SEED = 20240630
REF = date(2024, 6, 30)
"""The fixed "today" of the date-window questions (never the wall clock)."""
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
BIG_WINDOWS = {"window_span": timedelta(days=3650)}
"""Large histories close checkpoint windows by size only (1,000 facts): one user's two years
at the default one-day span make ~700 windows, and ingest time grows with windows x entities."""


# -- the expected side: typed rows computed from the observations ----------------------------------
def _d(text: str | None) -> date | None:
    return date.fromisoformat(text) if text else None


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)


def _m(value: float) -> Decimal:
    """A money amount as the exact decimal it was written as."""
    return Decimal(repr(value))


@dataclass(frozen=True)
class Tx:
    amount: Decimal
    on: date
    category: str
    merchant: str
    account: str


@dataclass(frozen=True)
class Trip:
    destination: str
    country: str
    start: date
    end: date
    international: bool
    purpose: str
    cost: float

    @property
    def nights(self) -> int:
        return (self.end - self.start).days


@dataclass(frozen=True)
class Buy:
    item: str
    price: float
    on: date
    merchant: str
    warranty_until: date | None
    return_by: date
    returned: bool


@dataclass(frozen=True)
class World:
    """One user's current state, typed, as the questions' Python side sees it."""

    tx: list[Tx]
    trips: list[Trip]
    buys: list[Buy]
    meds: list[dict[str, Any]]
    appointments: list[dict[str, Any]]
    events: list[dict[str, Any]]
    contacts: list[dict[str, Any]]

    @classmethod
    def of(cls, records: Sequence[Observation], user: str = USER) -> World:
        e = expected_entities(records, user)
        tx = [Tx(_m(a["amount"]), date.fromisoformat(a["date"]), a["category"], a["merchant"],
                 a["account"]) for a in e.get("transaction", [])]
        trips = [Trip(a["destination"], a["country"], date.fromisoformat(a["start_date"]),
                      date.fromisoformat(a["end_date"]), a["international"], a["purpose"],
                      a["cost"]) for a in e.get("trip", [])]
        buys = [Buy(a["item"], a["price"], date.fromisoformat(a["purchased_on"]), a["merchant"],
                    _d(a.get("warranty_until")), date.fromisoformat(a["return_by"]),
                    bool(a.get("returned", False))) for a in e.get("purchase", [])]
        appts = [{**a, "start": _ts(a["start"])} for a in e.get("appointment", [])]
        events = [{**a, "start": _ts(a["start"])} for a in e.get("event", [])]
        return cls(tx, trips, buys, e.get("medication", []), appts, events, e.get("contact", []))


def total(values: Iterable[Decimal]) -> Decimal | None:
    """SQL's sum: None over no rows."""
    items = list(values)
    return sum(items, Decimal(0)) if items else None


def mean(values: Iterable[float | Decimal | int]) -> float | None:
    items = [float(v) for v in values]
    return math.fsum(items) / len(items) if items else None


def pct(part: Decimal | float | int | None, whole: Decimal | float | int | None) -> float | None:
    if part is None or not whole:
        return None
    return 100 * float(part) / float(whole)


def month_of(d: date) -> date:
    return d.replace(day=1)


def in_window(d: date, days: int, ref: date = REF) -> bool:
    """The last ``days`` days up to and including ``ref``: (ref - days, ref]."""
    return ref - timedelta(days=days) < d <= ref


def spend_by(w: World, key: Callable[[Tx], Any], where: Callable[[Tx], bool] = lambda t: True
             ) -> dict[Any, Decimal]:
    out: dict[Any, Decimal] = defaultdict(Decimal)
    for t in w.tx:
        if where(t):
            out[key(t)] += t.amount
    return dict(out)


def top(pairs: dict[Any, Any], k: int) -> list[tuple[Any, Any]]:
    """The k largest values, ties by key ascending (as ORDER BY value DESC, key)."""
    return sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def monthly_change(w: World, year: int) -> list[tuple[date, Decimal, Decimal | None]]:
    by_month = spend_by(w, lambda t: month_of(t.on))
    rows: list[tuple[date, Decimal, Decimal | None]] = []
    previous: Decimal | None = None
    for m in range(1, 13):
        value = by_month.get(date(year, m, 1), Decimal(0))
        rows.append((date(year, m, 1), value, None if previous is None else value - previous))
        previous = value
    return rows


def open_returns(w: World, on: date) -> int:
    return sum(1 for b in w.buys if b.on <= on <= b.return_by and not b.returned)


# -- the questions ---------------------------------------------------------------------------------
EXACT, MONEY, APPROX = "exact", "money", "approx"


@dataclass(frozen=True)
class Q:
    """A question: its SQL, the expected rows computed in Python, and how each column compares."""

    id: str
    kind: str
    sql: str
    expect: Callable[[World], list[tuple[Any, ...]]]
    columns: tuple[str, ...] = ()
    """How each column compares (EXACT, MONEY, APPROX); empty: every column exactly."""


def one(value: Any) -> list[tuple[Any, ...]]:
    return [(value,)]


def _share_rows(spend: dict[str, Decimal]) -> list[tuple[Any, ...]]:
    whole = total(spend.values())
    return [(k, pct(v, whole)) for k, v in sorted(spend.items())]


def _q(w: World, year: int, quarter: int) -> Decimal | None:
    return total(t.amount for t in w.tx
                 if t.on.year == year and (t.on.month - 1) // 3 + 1 == quarter)


def _months_over(w: World, category: str, limit: Decimal) -> int:
    by_month = spend_by(w, lambda t: month_of(t.on), lambda t: t.category == category)
    return sum(1 for v in by_month.values() if v > limit)


def _yoy(w: World) -> list[tuple[Any, ...]]:
    y23 = total(t.amount for t in w.tx if t.on.year == 2023)
    y24 = total(t.amount for t in w.tx if t.on.year == 2024)
    diff = None if y23 is None or y24 is None else y24 - y23
    return [(y23, y24, diff, pct(diff, y23) if diff is not None else None)]


def _mom_pct(w: World) -> list[tuple[Any, ...]]:
    by_month = spend_by(w, lambda t: month_of(t.on))
    feb, mar = by_month.get(date(2024, 2, 1), Decimal(0)), by_month.get(date(2024, 3, 1), Decimal(0))
    return one(pct(mar - feb, feb))


def _during_trips_abroad(w: World) -> Decimal | None:
    abroad = [p for p in w.trips if p.international]
    return total(t.amount for t in w.tx if any(p.start <= t.on <= p.end for p in abroad))


def _days_since_trip(w: World) -> list[tuple[Any, ...]]:
    ends = [p.end for p in w.trips if p.end <= REF]
    return one((REF - max(ends)).days if ends else None)


def _busiest_weekday(w: World) -> list[tuple[Any, ...]]:
    counts = Counter(WEEKDAYS[e["start"].weekday()] for e in w.events)
    return top(dict(counts), 1)


MONTHS_2024 = ("WITH months AS (SELECT unnest(generate_series(DATE '2024-01-01', DATE '2024-12-01', "
               "INTERVAL 1 MONTH))::DATE AS month), "
               "spend AS (SELECT date_trunc('month', \"date\")::DATE AS month, "
               "sum(amount::DECIMAL(18, 2)) AS total FROM transactions GROUP BY 1) "
               "SELECT m.month, coalesce(s.total, 0) AS total, "
               "coalesce(s.total, 0) - lag(coalesce(s.total, 0)) OVER (ORDER BY m.month) AS change "
               "FROM months m LEFT JOIN spend s ON s.month = m.month ORDER BY m.month")

QUESTIONS: tuple[Q, ...] = (
    # counts
    Q("transactions", "count", "SELECT count(*) FROM transactions", lambda w: one(len(w.tx))),
    Q("international_trips_2024", "count",
      "SELECT count(*) FROM trips WHERE international AND year(start_date) = 2024",
      lambda w: one(sum(1 for p in w.trips if p.international and p.start.year == 2024))),
    Q("returned_purchases", "count", "SELECT count(*) FROM purchases WHERE returned",
      lambda w: one(sum(1 for b in w.buys if b.returned))),
    Q("active_medications", "count", "SELECT count(*) FROM medications WHERE status = 'active'",
      lambda w: one(sum(1 for m in w.meds if m["status"] == "active"))),
    # sums
    Q("total_spend", "sum", "SELECT round(sum(amount), 2) FROM transactions",
      lambda w: one(total(t.amount for t in w.tx)), (MONEY,)),
    Q("dining_2023", "sum",
      "SELECT sum(amount::DECIMAL(18, 2)) FROM transactions "
      "WHERE category = 'dining' AND year(\"date\") = 2023",
      lambda w: one(total(t.amount for t in w.tx if t.category == "dining" and t.on.year == 2023)),
      (MONEY,)),
    Q("trip_cost_2024", "sum",
      "SELECT round(sum(cost), 2) FROM trips WHERE year(start_date) = 2024",
      lambda w: one(total(_m(p.cost) for p in w.trips if p.start.year == 2024)), (MONEY,)),
    Q("kept_purchases_value", "sum",
      "SELECT round(sum(price), 2) FROM purchases WHERE NOT coalesce(returned, false)",
      lambda w: one(total(_m(b.price) for b in w.buys if not b.returned)), (MONEY,)),
    # averages
    Q("average_transaction", "average", "SELECT avg(amount) FROM transactions",
      lambda w: one(mean(t.amount for t in w.tx)), (APPROX,)),
    Q("average_international_trip_cost", "average",
      "SELECT avg(cost) FROM trips WHERE international",
      lambda w: one(mean(p.cost for p in w.trips if p.international)), (APPROX,)),
    Q("average_trip_length_days", "average", "SELECT avg(end_date - start_date) FROM trips",
      lambda w: one(mean(p.nights for p in w.trips)), (APPROX,)),
    Q("median_transaction", "average", "SELECT median(amount) FROM transactions",
      lambda w: one(statistics.median([float(t.amount) for t in w.tx]) if w.tx else None),
      (APPROX,)),
    Q("average_monthly_spend_2023", "average",
      "SELECT sum(amount::DECIMAL(18, 2)) / 12 FROM transactions WHERE year(\"date\") = 2023",
      lambda w: one(None if (s := total(t.amount for t in w.tx if t.on.year == 2023)) is None
                    else float(s) / 12), (APPROX,)),
    # group-by shares
    Q("category_share_pct", "share",
      "SELECT category, 100 * sum(amount) / (SELECT sum(amount) FROM transactions) AS pct "
      "FROM transactions GROUP BY category ORDER BY category",
      lambda w: _share_rows(spend_by(w, lambda t: t.category)), (EXACT, APPROX)),
    Q("account_share_pct_2024", "share",
      "SELECT account, 100 * sum(amount) / (SELECT sum(amount) FROM transactions "
      "WHERE year(\"date\") = 2024) FROM transactions WHERE year(\"date\") = 2024 "
      "GROUP BY account ORDER BY account",
      lambda w: _share_rows(spend_by(w, lambda t: t.account, lambda t: t.on.year == 2024)),
      (EXACT, APPROX)),
    Q("trips_by_purpose", "share",
      "SELECT purpose, count(*), 100.0 * count(*) / sum(count(*)) OVER () FROM trips "
      "GROUP BY purpose ORDER BY purpose",
      lambda w: [(k, v, pct(v, len(w.trips)))
                 for k, v in sorted(Counter(p.purpose for p in w.trips).items())],
      (EXACT, EXACT, APPROX)),
    Q("international_share_pct", "share",
      "SELECT 100.0 * count(*) FILTER (WHERE international) / nullif(count(*), 0) FROM trips",
      lambda w: one(pct(sum(1 for p in w.trips if p.international), len(w.trips))), (APPROX,)),
    Q("contacts_by_relationship", "share",
      "SELECT relationship, count(*) FROM contacts GROUP BY relationship ORDER BY relationship",
      lambda w: sorted(Counter(c["relationship"] for c in w.contacts).items())),
    Q("appointments_by_location", "share",
      "SELECT location, count(*) FROM appointments GROUP BY ALL ORDER BY location",
      lambda w: sorted(Counter(a["location"] for a in w.appointments).items())),
    # date windows
    Q("last_30_days", "window",
      "SELECT count(*), round(sum(amount), 2) FROM transactions "
      "WHERE \"date\" > DATE '2024-06-30' - INTERVAL 30 DAY AND \"date\" <= DATE '2024-06-30'",
      lambda w: [(sum(1 for t in w.tx if in_window(t.on, 30)),
                  total(t.amount for t in w.tx if in_window(t.on, 30)))], (EXACT, MONEY)),
    Q("last_90_days_by_category", "window",
      "SELECT category, count(*), sum(amount::DECIMAL(18, 2)) FROM transactions "
      "WHERE \"date\" > DATE '2024-06-30' - INTERVAL 90 DAY AND \"date\" <= DATE '2024-06-30' "
      "GROUP BY category ORDER BY category",
      lambda w: [(k, sum(1 for t in w.tx if t.category == k and in_window(t.on, 90)), v)
                 for k, v in sorted(spend_by(w, lambda t: t.category,
                                             lambda t: in_window(t.on, 90)).items())],
      (EXACT, EXACT, MONEY)),
    Q("q2_2024_spend", "window",
      "SELECT sum(amount::DECIMAL(18, 2)) FROM transactions "
      "WHERE year(\"date\") = 2024 AND quarter(\"date\") = 2",
      lambda w: one(_q(w, 2024, 2)), (MONEY,)),
    Q("november_2023", "window",
      "SELECT count(*), round(sum(amount), 2) FROM transactions "
      "WHERE date_trunc('month', \"date\") = DATE '2023-11-01'",
      lambda w: [(sum(1 for t in w.tx if month_of(t.on) == date(2023, 11, 1)),
                  total(t.amount for t in w.tx if month_of(t.on) == date(2023, 11, 1)))],
      (EXACT, MONEY)),
    Q("appointments_q1_2024", "window",
      "SELECT count(*) FROM appointments "
      "WHERE start >= TIMESTAMP '2024-01-01' AND start < TIMESTAMP '2024-04-01'",
      lambda w: one(sum(1 for a in w.appointments
                        if datetime(2024, 1, 1) <= a["start"] < datetime(2024, 4, 1)))),
    Q("trips_overlapping_july_2024", "window",
      "SELECT count(*) FROM trips WHERE start_date <= DATE '2024-07-31' "
      "AND end_date >= DATE '2024-07-01'",
      lambda w: one(sum(1 for p in w.trips
                        if p.start <= date(2024, 7, 31) and p.end >= date(2024, 7, 1)))),
    Q("spend_during_trips_abroad", "window",
      "SELECT round(sum(amount), 2) FROM transactions t WHERE EXISTS (SELECT 1 FROM trips p "
      "WHERE p.international AND t.\"date\" BETWEEN p.start_date AND p.end_date)",
      lambda w: one(_during_trips_abroad(w)), (MONEY,)),
    # top-k
    Q("top3_merchants_by_spend", "top-k",
      "SELECT merchant, sum(amount::DECIMAL(18, 2)) AS spend FROM transactions "
      "GROUP BY merchant ORDER BY spend DESC, merchant LIMIT 3",
      lambda w: top(spend_by(w, lambda t: t.merchant), 3), (EXACT, MONEY)),
    Q("top3_destinations_by_trips", "top-k",
      "SELECT destination, count(*) AS n FROM trips GROUP BY destination "
      "ORDER BY n DESC, destination LIMIT 3",
      lambda w: top(dict(Counter(p.destination for p in w.trips)), 3)),
    Q("top5_purchases_by_price", "top-k",
      "SELECT item, purchased_on, price FROM purchases "
      "ORDER BY price DESC, purchased_on, item LIMIT 5",
      lambda w: [(b.item, b.on, b.price)
                 for b in sorted(w.buys, key=lambda b: (-b.price, b.on, b.item))[:5]]),
    Q("top_spend_month_2023", "top-k",
      "SELECT month(\"date\") AS m, sum(amount::DECIMAL(18, 2)) AS s FROM transactions "
      "WHERE year(\"date\") = 2023 GROUP BY m ORDER BY s DESC, m LIMIT 1",
      lambda w: top(spend_by(w, lambda t: t.on.month, lambda t: t.on.year == 2023), 1),
      (EXACT, MONEY)),
    Q("busiest_event_weekday", "top-k",
      "SELECT dayname(start) AS d, count(*) AS n FROM events GROUP BY d ORDER BY n DESC, d LIMIT 1",
      _busiest_weekday),
    # min / max
    Q("largest_and_smallest_transaction", "min/max",
      "SELECT max(amount), min(amount) FROM transactions",
      lambda w: [(max((t.amount for t in w.tx), default=None),
                  min((t.amount for t in w.tx), default=None))], (MONEY, MONEY)),
    Q("first_departure_last_return", "min/max",
      "SELECT min(start_date), max(end_date) FROM trips",
      lambda w: [(min((p.start for p in w.trips), default=None),
                  max((p.end for p in w.trips), default=None))], (EXACT, EXACT)),
    Q("cheapest_international_trip", "min/max",
      "SELECT destination, start_date, cost FROM trips WHERE international "
      "ORDER BY cost, start_date, destination LIMIT 1",
      lambda w: [(p.destination, p.start, p.cost) for p in sorted(
          (p for p in w.trips if p.international),
          key=lambda p: (p.cost, p.start, p.destination))][:1]),
    Q("longest_trip_days", "min/max", "SELECT max(end_date - start_date) FROM trips",
      lambda w: one(max((p.nights for p in w.trips), default=None))),
    Q("days_since_last_trip", "min/max",
      "SELECT DATE '2024-06-30' - max(end_date) FROM trips WHERE end_date <= DATE '2024-06-30'",
      _days_since_trip),
    # thresholds
    Q("transactions_over_100", "threshold", "SELECT count(*) FROM transactions WHERE amount > 100",
      lambda w: one(sum(1 for t in w.tx if t.amount > 100))),
    Q("transactions_100_or_more", "threshold",
      "SELECT count(*) FROM transactions WHERE amount >= 100",
      lambda w: one(sum(1 for t in w.tx if t.amount >= 100))),
    Q("months_dining_over_300", "threshold",
      "SELECT count(*) FROM (SELECT date_trunc('month', \"date\") AS m FROM transactions "
      "WHERE category = 'dining' GROUP BY m HAVING sum(amount::DECIMAL(18, 2)) > 300)",
      lambda w: one(_months_over(w, "dining", Decimal(300)))),
    Q("under_warranty_on_ref", "threshold",
      "SELECT count(*) FROM purchases WHERE purchased_on <= DATE '2024-06-30' "
      "AND warranty_until >= DATE '2024-06-30'",
      lambda w: one(sum(1 for b in w.buys if b.on <= REF and b.warranty_until is not None
                        and b.warranty_until >= REF))),
    Q("return_windows_open_on_2024_03_15", "threshold",
      "SELECT count(*) FROM purchases WHERE purchased_on <= DATE '2024-03-15' "
      "AND return_by >= DATE '2024-03-15' AND NOT coalesce(returned, false)",
      lambda w: one(open_returns(w, date(2024, 3, 15)))),
    # trends
    Q("monthly_spend_2024_with_change", "trend", MONTHS_2024,
      lambda w: list(monthly_change(w, 2024)), (EXACT, MONEY, MONEY)),
    Q("march_vs_february_2024_pct", "trend",
      "WITH m AS (SELECT sum(amount::DECIMAL(18, 2)) FILTER (WHERE \"date\" BETWEEN "
      "DATE '2024-02-01' AND DATE '2024-02-29') AS feb, sum(amount::DECIMAL(18, 2)) FILTER "
      "(WHERE \"date\" BETWEEN DATE '2024-03-01' AND DATE '2024-03-31') AS mar FROM transactions) "
      "SELECT 100 * (coalesce(mar, 0) - feb) / nullif(feb, 0) FROM m",
      _mom_pct, (APPROX,)),
    Q("spend_year_over_year", "trend",
      "WITH y AS (SELECT sum(amount::DECIMAL(18, 2)) FILTER (WHERE year(\"date\") = 2023) AS y23, "
      "sum(amount::DECIMAL(18, 2)) FILTER (WHERE year(\"date\") = 2024) AS y24 FROM transactions) "
      "SELECT y23, y24, y24 - y23, 100 * (y24 - y23) / nullif(y23, 0) FROM y",
      _yoy, (MONEY, MONEY, MONEY, APPROX)),
    Q("trips_year_over_year", "trend",
      "SELECT count(*) FILTER (WHERE year(start_date) = 2024) "
      "- count(*) FILTER (WHERE year(start_date) = 2023) FROM trips",
      lambda w: one(sum(1 for p in w.trips if p.start.year == 2024)
                    - sum(1 for p in w.trips if p.start.year == 2023))),
    Q("trip_cost_by_quarter", "trend",
      "SELECT year(start_date) AS y, quarter(start_date) AS q, count(*), round(sum(cost), 2) "
      "FROM trips GROUP BY ALL ORDER BY y, q",
      lambda w: [(y, q, len(ps), total(_m(p.cost) for p in ps)) for (y, q), ps in sorted(
          _group(w.trips, lambda p: (p.start.year, (p.start.month - 1) // 3 + 1)).items())],
      (EXACT, EXACT, EXACT, MONEY)),
    # distinct counts
    Q("distinct_merchants", "distinct", "SELECT count(DISTINCT merchant) FROM transactions",
      lambda w: one(len({t.merchant for t in w.tx}))),
    Q("countries_visited_abroad", "distinct",
      "SELECT count(DISTINCT country) FROM trips WHERE international",
      lambda w: one(len({p.country for p in w.trips if p.international}))),
    Q("active_drug_classes", "distinct",
      "SELECT list(DISTINCT drug_class ORDER BY drug_class) FROM medications WHERE status = 'active'",
      lambda w: one(sorted({m["drug_class"] for m in w.meds if m["status"] == "active"}) or None)),
    Q("nights_abroad_2024", "sum",
      "SELECT sum(end_date - start_date) FROM trips WHERE international AND year(start_date) = 2024",
      lambda w: one(sum(p.nights for p in w.trips if p.international and p.start.year == 2024)
                    or None)),
)


def _group(items: Iterable[Trip], key: Callable[[Trip], Any]) -> dict[Any, list[Trip]]:
    out: dict[Any, list[Trip]] = defaultdict(list)
    for item in items:
        out[key(item)].append(item)
    return dict(out)


def _same(kind: str, got: Any, want: Any) -> bool:
    if want is None or got is None:
        return got is None and want is None
    if kind == MONEY:
        return Decimal(str(round(float(got), 2))) == Decimal(want) if not isinstance(
            got, Decimal) else got == Decimal(want)
    if kind == APPROX:
        return math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9)
    return bool(got == want)


def assert_answer(q: Q, rows: Sequence[Sequence[Any]], w: World) -> None:
    want = q.expect(w)
    assert len(rows) == len(want), f"{q.id}: got {rows!r}, want {want!r}"
    for got_row, want_row in zip(rows, want, strict=True):
        kinds = q.columns or (EXACT,) * len(want_row)
        assert len(got_row) == len(kinds) == len(want_row), f"{q.id}: {got_row!r} {want_row!r}"
        for kind, got, expected in zip(kinds, got_row, want_row, strict=True):
            assert _same(kind, got, expected), f"{q.id}: got {list(got_row)!r}, want {want_row!r}"


# -- fixtures: one ingest per size per module --------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    size: int
    records: list[Observation]
    settings: Settings
    world: World
    reader: DuckDBStateStore
    """One read-only connection kept open: `uac query` and api.query run exactly this ``query``
    (same checks, same per-user views), but open the store on every call (~80 ms)."""


SIZES = [20, 200, 1000, pytest.param(5000, marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"n{n}")
def mem(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    size = request.param
    records = generate_history(USER, size, seed=SEED + size)
    overrides: dict[str, Any] = BIG_WINDOWS if size >= 1000 else {}
    settings = memory(tmp_path_factory.mktemp(f"history-{size}"), records, **overrides)
    reader = DuckDBStateStore(settings.store_path, read_only=True)
    try:
        yield Memory(size, records, settings, World.of(records), reader)
    finally:
        reader.close()


def test_there_are_at_least_30_questions_of_every_kind() -> None:
    assert len(QUESTIONS) >= 30
    assert len({q.id for q in QUESTIONS}) == len(QUESTIONS)
    assert {q.kind for q in QUESTIONS} >= {"count", "sum", "average", "share", "window", "top-k",
                                          "min/max", "threshold", "trend", "distinct"}


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.id)
def test_question(mem: Memory, q: Q) -> None:
    assert_answer(q, mem.reader.query(USER, q.sql).rows, mem.world)


@pytest.mark.parametrize("q", [q for q in QUESTIONS if q.kind in ("count", "trend")], ids=lambda q: q.id)
def test_question_through_the_api(mem: Memory, q: Q) -> None:
    """The library call an agent framework makes gives the same exact answers."""
    assert_answer(q, api.query(USER, q.sql, settings=mem.settings).rows, mem.world)


def test_typed_tables_hold_the_resolved_values(mem: Memory) -> None:
    """Row by row, not only in aggregate: every transaction and trip as the rule resolves it."""
    rows = mem.reader.query(USER, "SELECT amount, \"date\", category, merchant, account "
                            "FROM transactions").rows
    want = sorted((float(t.amount), t.on, t.category, t.merchant, t.account) for t in mem.world.tx)
    assert sorted(rows) == want
    rows = mem.reader.query(USER, "SELECT destination, country, start_date, end_date, "
                            "international, purpose, cost FROM trips").rows
    assert sorted(rows) == sorted((p.destination, p.country, p.start, p.end, p.international,
                                   p.purpose, p.cost) for p in mem.world.trips)


# -- the generated data really exercises the contradiction rule ----------------------------------------
def _file_order_world(records: Sequence[Observation]) -> World:
    """The answer of a memory that ignores valid time and corrections: the last record read wins."""
    plain = [{k: v for k, v in r.items() if k != "supersedes"} for r in records]
    for r in plain:
        r["valid_time"] = r["observed_time"]
    return World.of(plain)


def test_history_is_deterministic_and_well_formed() -> None:
    a, b = generate_history(USER, 1000, seed=3), generate_history(USER, 1000, seed=3)
    assert a == b and len(a) == 1000
    assert generate_history(USER, 1000, seed=4) != a
    assert len({r["source_id"] for r in a}) == len(a)
    assert len({r["observed_time"] for r in a}) == len(a)
    assert [r["observed_time"] for r in a] == sorted(r["observed_time"] for r in a)
    assert {r["type"] for r in a} == {"trip", "transaction", "purchase", "medication",
                                      "appointment", "event", "contact"}
    assert any("supersedes" in r for r in a) and any(r.get("op") == "retract" for r in a)
    small = generate_history(USER, 20, seed=1)
    assert len(small) == 20 and {r["type"] for r in small} >= {"trip", "transaction", "purchase"}
    trips = [r for r in small if r["type"] == "trip"]
    assert {t["attributes"]["international"] for t in trips} == {True, False}


def test_answers_depend_on_resolving_updates_and_corrections() -> None:
    """Last-in-file-order and ignoring supersedes give different answers on the generated data."""
    records = generate_history(USER, 1000, seed=SEED + 1000)
    right, naive = World.of(records), _file_order_world(records)
    assert sorted(p.cost for p in right.trips) != sorted(p.cost for p in naive.trips)
    ignoring = World.of([{k: v for k, v in r.items() if k != "supersedes"} for r in records])
    assert sorted(t.on for t in right.tx) != sorted(t.on for t in ignoring.tx)


# -- through the real CLI ----------------------------------------------------------------------------
def uac_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real `uac` command in a subprocess."""
    return subprocess.run([sys.executable, "-m", "uac.cli", "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=120, check=False)


CLI_QUESTIONS = ("international_trips_2024", "total_spend", "top3_merchants_by_spend")


def test_questions_through_the_uac_command(tmp_path: Path) -> None:
    """`uac ingest` a JSON Lines history, then ask `uac query --json` as an agent would."""
    records = generate_history(USER, 200, seed=SEED + 200)
    path = write_jsonl(records, tmp_path / "history.jsonl")
    data_dir = tmp_path / "memory"
    ingested = uac_cli(data_dir, "ingest", str(path), "--json")
    assert ingested.returncode == 0, ingested.stderr
    assert orjson.loads(ingested.stdout)[0]["rejected"] == 0
    world = World.of(records)
    for q in (q for q in QUESTIONS if q.id in CLI_QUESTIONS):
        out = uac_cli(data_dir, "query", USER, "--sql", q.sql, "--json")
        assert out.returncode == 0, out.stderr
        payload = orjson.loads(out.stdout)
        assert set(payload) == {"columns", "rows"}
        assert len(payload["columns"]) == len(q.expect(world)[0])
        assert_answer(q, payload["rows"], world)


def test_the_uac_command_refuses_unsafe_sql(tmp_path: Path) -> None:
    settings = memory(tmp_path, generate_history(USER, 20, seed=1))
    out = uac_cli(settings.data_dir, "query", USER, "--sql", "SELECT * FROM store.trips", "--json")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("uac: error: qualified table names are not allowed")


# -- scoping: one user's answers, whatever the SQL says ------------------------------------------------
@pytest.fixture(scope="module")
def two_users(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, World]]:
    alice = generate_history("alice", 300, seed=101)
    bob = generate_history("bob", 120, seed=202)
    mixed = sorted(alice + bob, key=lambda r: r["observed_time"])
    settings = memory(tmp_path_factory.mktemp("two-users"), mixed)
    return settings, {"alice": World.of(mixed, "alice"), "bob": World.of(mixed, "bob")}


SCOPED = [q for q in QUESTIONS if q.id in (
    "transactions", "total_spend", "category_share_pct", "top3_merchants_by_spend",
    "international_share_pct", "monthly_spend_2024_with_change", "spend_during_trips_abroad")]


@pytest.mark.parametrize("q", SCOPED, ids=lambda q: q.id)
def test_the_same_sql_answers_for_each_user(two_users: tuple[Settings, dict[str, World]],
                                            q: Q) -> None:
    settings, worlds = two_users
    answers = {}
    for user, world in worlds.items():
        rows = api.query(user, q.sql, settings=settings).rows
        assert_answer(q, rows, world)
        answers[user] = rows
    assert answers["alice"] != answers["bob"]


def test_a_user_sees_only_their_own_rows_in_every_table(
        two_users: tuple[Settings, dict[str, World]]) -> None:
    settings, _ = two_users
    for table in ("facts", "entities", "state_changes", "trips", "transactions", "purchases"):
        for user in ("alice", "bob"):
            got = api.query(user, f"SELECT DISTINCT user_id FROM {table}", settings=settings).rows
            assert got == [(user,)], table


def test_one_connection_rescopes_when_the_user_changes(
        two_users: tuple[Settings, dict[str, World]]) -> None:
    """A long-lived reader (a server) asking for alice, bob, alice, ... gets each one's answer."""
    settings, worlds = two_users
    q = next(q for q in QUESTIONS if q.id == "top3_merchants_by_spend")
    reader = DuckDBStateStore(settings.store_path, read_only=True)
    try:
        for user in ("alice", "bob", "alice", "mallory", "bob"):
            rows = reader.query(user, q.sql).rows
            if user == "mallory":
                assert rows == []
            else:
                assert_answer(q, rows, worlds[user])
    finally:
        reader.close()


@pytest.mark.parametrize("user", ["mallory", "", "alice' OR '1'='1", "ALICE", "bob "])
def test_an_unknown_user_gets_nothing(two_users: tuple[Settings, dict[str, World]],
                                      user: str) -> None:
    settings, _ = two_users
    assert api.query(user, "SELECT count(*) FROM trips", settings=settings).scalar() == 0
    assert api.query(user, "SELECT * FROM transactions", settings=settings).rows == []
    assert api.query(user, "SELECT sum(amount) FROM transactions", settings=settings).scalar() is None


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT count(*) FROM store.trips", "qualified table names are not allowed"),
    ("SELECT count(*) FROM trips t JOIN store.transactions x ON true",
     "qualified table names are not allowed"),
    ("SELECT (SELECT count(*) FROM main.facts)", "qualified table names are not allowed"),
    ("SELECT * FROM read_csv('/etc/passwd')", "table functions"),
    ("SELECT * FROM query('SELECT * FROM store.trips')", "table functions"),
    ("DELETE FROM trips", "only read-only SELECT"),
    ("COPY trips TO 'out.csv'", "only read-only SELECT"),
    ("ATTACH 'other.duckdb' AS other", "only read-only SELECT"),
    ("SELECT 1; SELECT 2", "exactly one statement is allowed, got 2"),
    ("SELECT count(*) FROM trips; DELETE FROM trips", "only read-only SELECT"),
    ("SELECT * FROM secrets", "unknown table 'secrets'"),
    ("", "empty query"),
])
def test_unsafe_or_unknown_sql_is_refused(two_users: tuple[Settings, dict[str, World]], sql: str,
                                          message: str) -> None:
    settings, _ = two_users
    with pytest.raises(QueryError) as refused:
        api.query("alice", sql, settings=settings)
    assert message in str(refused.value)
    # nothing changed
    assert api.query("alice", "SELECT count(*) FROM trips", settings=settings).scalar() == len(
        two_users[1]["alice"].trips)


def test_memory_helper_refuses_bad_observations(tmp_path: Path) -> None:
    good = generate_history(USER, 5, seed=1)
    bad = {**good[0], "valid_time": "not a date", "source_id": "broken-1"}
    with pytest.raises(ValidationError, match="1 observation"):
        memory(tmp_path, [*good, bad])
    settings = memory(tmp_path, [*good, bad], strict=False)
    assert [r.source for r in api.rejects(settings=settings)] == ["<input>:6"]
    assert observation_lines(good)[0].endswith("\n")
