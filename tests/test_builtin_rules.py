"""The built-in rules over real facts and the real fold, driven through the alert lifecycle."""

from __future__ import annotations

import ast
import importlib
import random
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, cast

import pytest
from rulekit import Memory, at

from uac.checkpointer.state import EntityKey, UserState
from uac.executor.alerts import AlertStatus, select
from uac.executor.builtin import (
    BUILTIN_MODULES,
    BUILTIN_RULES,
    deadline_approaching,
    drug_allergy,
    overlapping_commitments,
    passport_validity,
    payment_destination_conflict,
    single_entry_visa_used,
    spending_limit,
    warranty_or_return_lapsing,
)
from uac.executor.builtin_common import add_months, country_key
from uac.executor.builtin_money import period_bounds
from uac.executor.rules import Finding, RuleContext, Severity, rule

NOW = "2025-04-27T09:00"  # a Sunday


# --- the rule set -------------------------------------------------------------------------------


def test_builtin_rules_are_listed_once_with_descriptions() -> None:
    ids = [r.rule_id for r in BUILTIN_RULES]
    assert ids == [
        "drug_allergy", "passport_validity", "single_entry_visa_used", "overlapping_commitments",
        "spending_limit", "payment_destination_conflict", "deadline_approaching",
        "warranty_or_return_lapsing",
    ]
    for r in BUILTIN_RULES:
        assert r.description and r.reads
    assert {r.rule_id for r in BUILTIN_RULES if not r.time_based} == {
        "drug_allergy", "payment_destination_conflict"}


def test_select_runs_only_rules_whose_types_changed_and_time_based_ones_on_a_tick() -> None:
    assert [r.rule_id for r in select(BUILTIN_RULES, {"medication"}, tick=False)] == [
        "drug_allergy"]
    assert [r.rule_id for r in select(BUILTIN_RULES, {"trip"}, tick=False)] == [
        "passport_validity", "single_entry_visa_used"]
    assert [r.rule_id for r in select(BUILTIN_RULES, {"recurring_commitment", "budget"},
                                      tick=False)] == ["overlapping_commitments", "spending_limit"]
    assert select(BUILTIN_RULES, {"contact", "preference"}, tick=False) == []
    assert select(BUILTIN_RULES, set(), tick=False) == []
    on_tick = [r.rule_id for r in select(BUILTIN_RULES, set(), tick=True)]
    assert on_tick == sorted(r.rule_id for r in BUILTIN_RULES if r.time_based)
    assert "drug_allergy" not in on_tick and "payment_destination_conflict" not in on_tick
    both = select(BUILTIN_RULES, {"payment_instruction"}, tick=True)
    assert "payment_destination_conflict" in [r.rule_id for r in both]
    assert drug_allergy.wants({"allergy"}, tick=False)
    assert not drug_allergy.wants({"trip"}, tick=True)
    assert deadline_approaching.wants(set(), tick=True)
    assert not deadline_approaching.wants({"medication"}, tick=False)


def test_a_failing_rule_becomes_a_rule_failure_and_the_others_still_run() -> None:
    @rule("boom", reads=("allergy",))
    def boom(state: UserState, ctx: RuleContext) -> list[Finding]:
        """Always fails."""
        raise RuntimeError("kaput")

    @rule("garbage", reads=("allergy",))
    def garbage(state: UserState, ctx: RuleContext) -> list[Finding]:
        """Returns something that is not a finding."""
        return cast(list[Finding], ["not a finding"])

    mem = Memory([boom, garbage, drug_allergy])
    mem.add("allergy", "penicillin", source="s1", substance="penicillin")
    mem.add("medication", "amoxicillin", source="s2", name="amoxicillin")
    out = mem.run(NOW)
    assert [(f.rule_id, f.reason) for f in out.failures] == [
        ("boom", "RuntimeError: kaput"), ("garbage", "TypeError: returned str, not a Finding")]
    assert out.failures[0].at == at(NOW) and out.failures[0].user_id == "u1"
    assert [a.rule_id for a in out.raised] == ["drug_allergy"]


def _everything(mem: Memory) -> None:
    """One fact set that makes every built-in rule raise at NOW."""
    mem.add("allergy", "penicillin", source="a1", substance="Penicillin")
    mem.add("medication", "amoxicillin", source="a2", name="Amoxicillin 500mg")
    mem.add("passport", "us", source="a3", country="US", expiry_date="2025-09-01")
    mem.add("trip", "tokyo", source="a4", destination="Tokyo", country="JP",
            start_date="2025-05-01", end_date="2025-05-10")
    mem.add("visa", "jp", source="a5", country="Japan", entries="single",
            valid_from="2025-01-01", valid_until="2025-12-31", used_on="2025-02-01")
    mem.add("event", "e1", source="a6", title="Lunch", start="2025-05-01T12:00Z")
    mem.add("appointment", "a1", source="a7", title="Dentist", start="2025-05-01T12:30Z")
    mem.add("recurring_commitment", "gym", source="a8", title="Gym", weekday="thursday",
            start_time="12:00", end_time="13:00")
    mem.add("budget", "b", source="a9", category="all", limit=10, period="month")
    mem.add("transaction", "t1", source="a10", amount=25, date="2025-04-02", category="x")
    mem.add("payment_instruction", "p1", source="a11", payee="Acme", destination_account="A1")
    mem.add("payment_instruction", "p2", source="a12", payee="acme", destination_account="B2")
    mem.add("deadline", "d", source="a13", title="Taxes", due="2025-04-30")
    mem.add("contract", "c", source="a14", title="Lease", end_date="2025-05-31", notice_days=30)
    mem.add("purchase", "p", source="a15", item="Phone", return_by="2025-05-03",
            warranty_until="2025-05-05")


def test_every_rule_raises_on_a_combined_state_deterministically() -> None:
    mem = Memory(BUILTIN_RULES)
    _everything(mem)
    first = mem.findings(NOW)
    assert {f.subject.split("|")[0].split("/")[0] for f in first} >= {
        "medication", "trip", "visa", "appointment", "event", "budget", "payee:acme",
        "deadline", "contract", "purchase"}
    out = mem.run(NOW)
    assert not out.failures
    assert {a.rule_id for a in out.raised} == {r.rule_id for r in BUILTIN_RULES}
    for seed in range(3):  # the fold is order-independent, and so are the findings
        random.Random(seed).shuffle(mem.facts)
        assert mem.findings(NOW) == first


@dataclass(frozen=True)
class _View:
    """Only the surface an exported project re-implements."""

    __slots__ = ("attributes", "entity_id", "entity_type", "key", "model")
    entity_type: str
    entity_id: str
    key: EntityKey
    model: Any
    attributes: dict[str, Any]


class _State:
    __slots__ = ("_views",)
    group = None

    def __init__(self, state: UserState) -> None:
        self._views = [_View(v.entity_type, v.entity_id, v.key, v.model, dict(v.attributes))
                       for v in state.current()]

    def of_type(self, entity_type: str) -> list[_View]:
        return [v for v in self._views if v.entity_type == entity_type]

    def entity(self, entity_type: str, entity_id: str) -> _View | None:
        return next((v for v in self._views if v.key == (entity_type, entity_id)), None)


def test_rules_use_only_the_exported_state_surface() -> None:
    mem = Memory(BUILTIN_RULES)
    _everything(mem)
    state, ctx = mem.state(), mem.context(NOW)
    small = cast(UserState, _State(state))
    for r in BUILTIN_RULES:
        assert list(r.evaluate(small, ctx)) == list(r.evaluate(state, ctx)), r.rule_id


def test_builtin_modules_import_only_stdlib_rules_state_and_each_other() -> None:
    allowed = {"uac.executor.rules", "uac.checkpointer.state", *BUILTIN_MODULES}
    for name in BUILTIN_MODULES:
        module = importlib.import_module(name)
        tree = ast.parse(Path(cast(str, module.__file__)).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
                assert not node.module.startswith("uac") or node.module in allowed, (
                    name, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("uac") for a in node.names), name
            if isinstance(node, ast.Attribute):  # no wall clock
                assert node.attr not in ("now", "today", "utcnow") or (
                    isinstance(node.value, ast.Name) and node.value.id == "ctx"), (name, node.attr)


# --- drug_allergy -------------------------------------------------------------------------------


def test_penicillin_allergy_vs_amoxicillin_is_critical_and_follows_the_lifecycle() -> None:
    mem = Memory([drug_allergy])
    mem.add("allergy", "penicillin", source="turn-1", substance="Penicillin", reaction="hives")
    assert mem.run(NOW).events == []  # (b) no prescription yet
    rx = mem.add("medication", "amoxicillin", source="turn-2", name="Amoxicillin 500mg",
                 status="active")
    alert = mem.run(NOW).only_raised()  # (a)
    assert alert.severity is Severity.CRITICAL
    assert alert.subject == "medication/amoxicillin|allergy/penicillin"
    assert alert.details == {"drug": "Amoxicillin 500mg", "allergen": "Penicillin",
                             "class": "penicillins", "allergen_class": "penicillins",
                             "match": "class", "reaction": "hives"}
    assert alert.message == "Amoxicillin 500mg is a penicillin; you are allergic to Penicillin"
    assert alert.evidence.entities == ("medication/amoxicillin", "allergy/penicillin")
    assert alert.evidence.sources == ("turn-1", "turn-2")
    assert rx.fact_id in alert.evidence.fact_ids
    assert alert.raised_at == at(NOW)
    mem.add("contact", "ann", source="turn-3", name="Ann")  # (c) unrelated change
    mem.add("medication", "amoxicillin", source="turn-4", valid="2025-02-01", dose="500 mg")
    assert mem.run("2025-04-28").events == []
    # (d) the prescription turns out to be a mis-hearing: the correction supersedes turn-2
    mem.add("medication", "azithromycin", source="turn-5", supersedes=("turn-2", "turn-4"),
            name="Azithromycin")
    assert mem.state().entity("medication", "amoxicillin") is None
    out = mem.run("2025-04-29")
    assert [a.subject for a in out.resolved] == ["medication/amoxicillin|allergy/penicillin"]
    assert out.resolved[0].status is AlertStatus.RESOLVED
    assert out.resolved[0].resolved_at == at("2025-04-29") and out.raised == []


def test_stopping_the_medication_resolves_the_alert() -> None:
    mem = Memory([drug_allergy])
    mem.add("allergy", "penicillin", source="s1", substance="penicillin")
    mem.add("medication", "augmentin", source="s2", name="Augmentin", valid="2025-03-01")
    assert mem.run(NOW).only_raised().details["match"] == "class"
    mem.add("medication", "augmentin", source="s3", valid="2025-04-20", status="Stopped")
    assert [a.rule_id for a in mem.run(NOW).resolved] == ["drug_allergy"]


def test_cephalosporin_against_a_penicillin_allergy_is_a_warning() -> None:
    mem = Memory([drug_allergy])
    mem.add("allergy", "penicillin", source="s1", substance="penicillin allergy")
    mem.add("medication", "cefdinir", source="s2", name="Cefdinir 300 mg")
    alert = mem.run(NOW).only_raised()
    assert alert.severity is Severity.WARNING
    assert alert.details["match"] == "cross-reactivity"
    assert alert.details["class"] == "cephalosporins"
    assert alert.details["allergen_class"] == "penicillins"
    assert "cross-reactivity is possible" in alert.message


def test_peanut_allergy_does_not_conflict_with_amoxicillin() -> None:
    mem = Memory([drug_allergy])
    mem.add("allergy", "peanuts", source="s1", substance="peanuts")
    mem.add("medication", "amoxicillin", source="s2", name="Amoxicillin 500mg")
    assert mem.run(NOW).events == []


@pytest.mark.parametrize(
    ("allergen", "name", "drug_class", "expected"),
    [
        ("penicillin", "amoxicillin-clavulanate 875mg", None, Severity.CRITICAL),
        ("PENICILLINS", "Dicloxacillin", None, Severity.CRITICAL),
        ("penicillin", "Zithromax", "Penicillin", Severity.CRITICAL),  # via drug_class
        ("amoxicillin", "Ampicillin", None, Severity.CRITICAL),  # same class
        ("amoxicillin", "Amoxicillin", None, Severity.CRITICAL),  # direct
        ("cephalexin", "Ceftriaxone", None, Severity.WARNING),
        ("cephalosporins", "cefuroxime", None, Severity.CRITICAL),
        ("cephalexin", "amoxicillin", None, Severity.WARNING),  # cross-reactivity
        ("sulfa drugs", "Bactrim DS", None, Severity.CRITICAL),
        ("Sulfonamides", "trimethoprim-sulfamethoxazole", None, Severity.CRITICAL),
        ("NSAIDs", "Naproxen 220mg", None, Severity.CRITICAL),
        ("aspirin", "Ibuprofen", None, Severity.CRITICAL),
        ("codeine", "Morphine", None, Severity.WARNING),
        ("lisinopril", "Lisinopril 10 mg", None, Severity.CRITICAL),
        ("penicillin", "azithromycin", None, None),
        ("trimethoprim", "nitrofurantoin", None, None),
        ("shellfish", "ibuprofen", "NSAID", None),
        ("latex", "Latanoprost", None, None),
    ],
)
def test_drug_allergy_matching(allergen: str, name: str, drug_class: str | None,
                               expected: Severity | None) -> None:
    mem = Memory([drug_allergy])
    mem.add("allergy", "x", source="s1", substance=allergen)
    mem.add("medication", "m", source="s2", name=name, drug_class=drug_class)
    findings = mem.findings(NOW)
    assert [f.severity for f in findings] == ([expected] if expected else [])


def test_stopped_medication_and_missing_names_are_ignored() -> None:
    mem = Memory([drug_allergy])
    mem.add("allergy", "penicillin", source="s1", substance="penicillin")
    mem.add("allergy", "blank", source="s2", reaction="rash")
    mem.add("medication", "amoxicillin", source="s3", name="amoxicillin", status="stopped")
    mem.add("medication", "unknown", source="s4", dose="5 mg")
    assert mem.findings(NOW) == []


# --- passport_validity --------------------------------------------------------------------------


def _tokyo(mem: Memory, **extra: Any) -> None:
    mem.add("trip", "tokyo", source="trip-1", destination="Tokyo", country="JP",
            start_date="2025-05-01", end_date="2025-05-10", **extra)


def test_passport_expiring_within_six_months_of_return_is_flagged() -> None:
    mem = Memory([passport_validity])
    _tokyo(mem, international=True)
    assert mem.run(NOW).events == []  # (b) no passport on record: we do not know
    mem.add("passport", "us", source="pp-1", country="US", expiry_date="2025-09-01")
    alert = mem.run(NOW).only_raised()  # (a)
    assert alert.severity is Severity.WARNING
    assert alert.subject == "trip/tokyo"
    assert alert.details == {
        "expiry_date": "2025-09-01", "passport": "passport/us", "trip_start": "2025-05-01",
        "trip_end": "2025-05-10", "required_until": "2025-11-10", "destination": "Tokyo"}
    assert "2025-09-01" in alert.message and "2025-05-01 to 2025-05-10" in alert.message
    assert "2025-11-10" in alert.message
    assert alert.evidence.entities == ("trip/tokyo", "passport/us")
    assert alert.evidence.sources == ("pp-1", "trip-1")
    mem.add("transaction", "t", source="x", amount=3, date="2025-04-27")  # (c)
    assert mem.run(NOW).events == []
    assert mem.run("2025-04-28").events == []  # the next day's tick
    # (d) a renewed passport
    mem.add("passport", "us", source="pp-2", valid="2025-04-28", expiry_date="2035-04-01")
    assert [a.subject for a in mem.run("2025-04-28T10:00").resolved] == ["trip/tokyo"]


def test_passport_alert_resolves_once_the_trip_is_over() -> None:
    mem = Memory([passport_validity])
    _tokyo(mem)  # no explicit flag: JP differs from the passport's country
    mem.add("passport", "us", source="pp-1", country="United States", expiry_date="2025-06-01")
    assert mem.run(NOW).only_raised().subject == "trip/tokyo"
    assert mem.run("2025-05-10").events == []  # last day of the trip: still relevant
    assert len(mem.run("2025-05-11").resolved) == 1


@pytest.mark.parametrize(
    ("trip", "passports", "raised"),
    [
        ({"country": "US"}, [("us", "USA", "2025-06-01")], False),  # domestic
        ({"country": "jp", "international": False}, [("us", "US", "2025-06-01")], False),
        ({"international": True}, [("us", "US", "2025-11-10")], False),  # exactly six months
        ({"international": True}, [("us", "US", "2025-11-09")], True),
        ({"international": True}, [("us", "US", "2025-06-01"), ("fr", "FR", "2030-01-01")],
         False),  # a second passport is fine
        ({"country": "JP"}, [("us", "US", "2025-06-01"), ("jp", "Japan", "2025-06-01")],
         False),  # a citizen of the destination
        ({"international": True}, [("us", "US", None)], False),  # unknown expiry
        ({"country": "JP"}, [("x", None, "2025-06-01")], False),  # cannot tell if abroad
    ],
)
def test_passport_cases(trip: dict[str, Any], passports: list[tuple[str, str | None, str | None]],
                        raised: bool) -> None:
    mem = Memory([passport_validity])
    mem.add("trip", "t", source="t", start_date="2025-05-01", end_date="2025-05-10", **trip)
    for pid, country, expiry in passports:
        mem.add("passport", pid, source=pid, country=country, expiry_date=expiry)
    assert bool(mem.findings(NOW)) is raised


def test_passport_uses_calendar_months_and_ignores_past_trips() -> None:
    assert add_months(date(2025, 8, 31), 6) == date(2026, 2, 28)
    assert add_months(date(2023, 8, 31), 6) == date(2024, 2, 29)
    assert add_months(date(2025, 11, 15), 2) == date(2026, 1, 15)
    mem = Memory([passport_validity])
    mem.add("passport", "us", source="p", country="US", expiry_date="2026-02-27")
    mem.add("trip", "past", source="t1", country="FR", start_date="2025-03-01",
            end_date="2025-03-05")
    mem.add("trip", "oneway", source="t2", country="FR", start_date="2025-08-31")
    findings = mem.findings(NOW)
    assert [f.subject for f in findings] == ["trip/oneway"]
    assert findings[0].details["required_until"] == "2026-02-28"
    assert findings[0].details["trip_start"] == "2025-08-31"


# --- single_entry_visa_used ---------------------------------------------------------------------


def _visa(mem: Memory, **extra: Any) -> None:
    mem.add("visa", "jp", source="visa-1", country="Japan", entries="single",
            valid_from="2025-03-01", valid_until="2025-08-31", **extra)


def test_used_single_entry_visa_with_an_upcoming_trip_is_flagged() -> None:
    mem = Memory([single_entry_visa_used])
    _visa(mem)
    mem.add("trip", "osaka", source="trip-2", destination="Osaka", country="jp",
            start_date="2025-05-01")
    assert mem.run(NOW).events == []  # (b) not used yet
    mem.add("visa", "jp", source="visa-2", valid="2025-03-20", used_on="2025-03-15")
    alert = mem.run(NOW).only_raised()  # (a)
    assert alert.severity is Severity.WARNING
    assert alert.subject == "visa/jp|trip/osaka"
    assert alert.details == {
        "country": "Japan", "used_on": "2025-03-15", "previous_trips": [],
        "trip_start": "2025-05-01", "valid_from": "2025-03-01", "valid_until": "2025-08-31"}
    assert "2025-03-15" in alert.message and "Osaka" in alert.message
    assert alert.evidence.entities == ("visa/jp", "trip/osaka")
    assert alert.evidence.sources == ("trip-2", "visa-1", "visa-2")
    mem.add("passport", "us", source="pp", country="US")  # (c)
    assert mem.run("2025-04-28").events == []
    # (d) it was a multiple-entry visa after all
    mem.add("visa", "jp", source="visa-3", supersedes=("visa-1",), country="Japan",
            entries="multiple", valid_from="2025-03-01", valid_until="2025-08-31")
    assert [a.subject for a in mem.run("2025-04-28").resolved] == ["visa/jp|trip/osaka"]


def test_a_past_trip_inside_the_validity_uses_the_visa() -> None:
    mem = Memory([single_entry_visa_used])
    _visa(mem)
    mem.add("trip", "kyoto", source="t1", destination="Kyoto", country="Japan",
            start_date="2025-03-10", end_date="2025-03-20")
    mem.add("trip", "old", source="t0", country="Japan", start_date="2024-06-01")  # before
    mem.add("trip", "later", source="t3", country="Japan", start_date="2025-10-01")  # after
    mem.add("trip", "paris", source="t4", country="France", start_date="2025-06-01")
    assert mem.run("2025-03-01").events == []  # only upcoming trips, none used yet
    mem.add("trip", "osaka", source="t2", destination="Osaka", country="JP",
            start_date="2025-06-01")
    alert = mem.run(NOW).only_raised()
    assert alert.subject == "visa/jp|trip/osaka"
    assert alert.details["previous_trips"] == ["trip/kyoto"]
    assert "trip to Kyoto" in alert.message
    assert alert.evidence.entities == ("visa/jp", "trip/osaka", "trip/kyoto")
    # the trip taking place is not a second alert; once it has started it resolves
    out = mem.run("2025-06-02")
    assert out.raised == [] and len(out.resolved) == 1


# --- overlapping_commitments --------------------------------------------------------------------


def test_overlapping_event_and_appointment_are_flagged() -> None:
    mem = Memory([overlapping_commitments])
    mem.add("event", "review", source="cal-1", title="Design review",
            start="2025-05-01T10:00Z", end="2025-05-01T11:00Z")
    mem.add("appointment", "dentist", source="cal-0", title="Dentist",
            start="2025-05-01T11:00Z")  # back to back is no overlap
    assert mem.run(NOW).events == []  # (b)
    mem.add("appointment", "dentist", source="cal-2", valid="2025-02-01",
            start="2025-05-01T10:30Z")
    alert = mem.run(NOW).only_raised()  # (a)
    assert alert.severity is Severity.WARNING
    assert alert.subject == "appointment/dentist|event/review"
    assert alert.details == {
        "entities": ["appointment/dentist", "event/review"],
        "titles": ["Dentist", "Design review"],
        "overlap_start": "2025-05-01T10:30:00Z", "overlap_end": "2025-05-01T11:00:00Z"}
    assert alert.message == ("'Dentist' (2025-05-01 10:30-11:30 UTC) overlaps 'Design review' "
                             "(2025-05-01 10:00-11:00 UTC)")
    assert alert.evidence.sources == ("cal-0", "cal-1", "cal-2")
    mem.add("event", "dinner", source="cal-3", title="Dinner", start="2025-05-01T19:00Z")  # (c)
    assert mem.run("2025-04-28").events == []
    # (d) rescheduled
    mem.add("appointment", "dentist", source="cal-4", valid="2025-03-01",
            start="2025-05-02T10:30Z")
    assert [a.subject for a in mem.run("2025-04-28").resolved] == [alert.subject]


def test_overlap_ignores_past_and_far_future_items_and_resolves_when_it_starts() -> None:
    mem = Memory([overlapping_commitments])
    mem.add("event", "a", source="1", title="A", start="2025-04-20T10:00Z")
    mem.add("event", "b", source="2", title="B", start="2025-04-20T10:30Z")
    mem.add("event", "c", source="3", title="C", start="2026-06-01T10:00Z")
    mem.add("event", "d", source="4", title="D", start="2026-06-01T10:15Z")
    mem.add("event", "e", source="5", title="E", start="2025-05-01T10:00Z",
            end="2025-05-01T09:00Z")  # an end before the start means one hour
    mem.add("event", "f", source="6", title="F", start="2025-05-01T10:59Z")
    assert [a.subject for a in mem.run(NOW).raised] == ["event/e|event/f"]
    assert len(mem.run("2025-05-01T10:01").resolved) == 1


def test_event_overlapping_a_weekly_recurring_commitment_is_flagged() -> None:
    mem = Memory([overlapping_commitments])
    mem.add("recurring_commitment", "standup", source="r-1", title="Standup",
            weekday="Tuesday", start_time="09:30", end_time="10:00", starts_on="2025-01-01")
    mem.add("event", "call", source="c-1", title="Client call", start="2025-04-28T09:30Z",
            end="2025-04-28T10:30Z")  # a Monday
    assert mem.run(NOW).events == []  # (b)
    mem.add("event", "call", source="c-2", valid="2025-02-01", start="2025-04-29T09:45Z",
            end="2025-04-29T10:15Z")  # now a Tuesday
    alert = mem.run(NOW).only_raised()  # (a)
    assert alert.subject == "event/call|recurring_commitment/standup"
    assert alert.message == ("'Client call' (2025-04-29 09:45-10:15 UTC) overlaps 'Standup' "
                             "(every Tuesday 09:30-10:00 UTC)")
    assert alert.details["overlap_start"] == "2025-04-29T09:45:00Z"
    assert alert.details["overlap_end"] == "2025-04-29T10:00:00Z"
    assert alert.evidence.sources == ("c-1", "c-2", "r-1")
    mem.add("deadline", "d", source="d", title="x", due="2025-05-01")  # (c)
    assert mem.run("2025-04-28").events == []
    # (d) the standup ends before that Tuesday
    mem.add("recurring_commitment", "standup", source="r-2", valid="2025-04-01",
            ends_on="2025-04-28")
    assert len(mem.run("2025-04-28").resolved) == 1


def test_recurring_commitments_respect_their_date_range_and_overlap_each_other() -> None:
    mem = Memory([overlapping_commitments])
    mem.add("recurring_commitment", "yoga", source="1", title="Yoga", weekday="wed",
            start_time="23:30", end_time="00:30", starts_on="2025-06-01")  # past midnight
    mem.add("event", "late", source="2", title="Late", start="2025-05-01T00:00Z")  # a Thursday
    mem.add("event", "early", source="3", title="Early", start="2025-06-05T00:00Z")  # Thursday
    mem.add("recurring_commitment", "choir", source="4", title="Choir", weekday="Thursdays",
            start_time="00:15", end_time="01:00")
    mem.add("recurring_commitment", "old", source="5", title="Old", weekday="Thursday",
            start_time="00:00", ends_on="2025-04-01")
    mem.add("recurring_commitment", "bad", source="6", title="Bad", weekday="someday",
            start_time="00:00")
    subjects = [f.subject for f in mem.findings(NOW)]
    assert subjects == [
        "event/early|recurring_commitment/choir",
        "event/early|recurring_commitment/yoga",
        "event/late|recurring_commitment/choir",
        "recurring_commitment/choir|recurring_commitment/yoga",
    ]
    pair = mem.findings(NOW)[-1]
    assert pair.details["overlap_start"] == "2025-06-05T00:15:00Z"
    assert "every Wednesday 23:30-00:30 UTC" in pair.message


# --- spending_limit -----------------------------------------------------------------------------


def test_spending_over_a_monthly_budget_is_flagged_once_per_period() -> None:
    mem = Memory([spending_limit])
    mem.add("budget", "groceries", source="b-1", category="Groceries", limit=300,
            currency="USD", period="month")
    mem.add("transaction", "t1", source="tx-1", amount=200, currency="USD", date="2025-04-05",
            category="groceries")
    mem.add("transaction", "t0", source="tx-0", amount=500, date="2025-03-30",
            category="groceries")  # last month
    assert mem.run(NOW).events == []  # (b)
    mem.add("transaction", "t2", source="tx-2", amount=150.5, date="2025-04-20",
            category=" GROCERIES ")
    alert = mem.run(NOW).only_raised()  # (a)
    assert alert.severity is Severity.WARNING
    assert alert.subject == "budget/groceries|2025-04-01"
    assert alert.details == {
        "category": "Groceries", "period": "month", "spent": 350.5, "limit": 300.0,
        "currency": "USD", "period_start": "2025-04-01", "period_end": "2025-04-30"}
    assert "350.50 USD" in alert.message and "300.00 USD" in alert.message
    assert alert.evidence.entities == ("budget/groceries", "transaction/t1", "transaction/t2")
    assert alert.evidence.sources == ("b-1", "tx-1", "tx-2")
    mem.add("transaction", "t3", source="tx-3", amount=40, date="2025-04-21",
            category="dining")  # (c)
    mem.add("transaction", "t4", source="tx-4", amount=10, date="2025-04-22",
            category="groceries")  # still over: no second alert
    assert mem.run("2025-04-28").events == []
    # (d) the limit is raised
    mem.add("budget", "groceries", source="b-2", valid="2025-04-25", limit=400)
    assert [a.subject for a in mem.run("2025-04-28").resolved] == [alert.subject]


def test_a_new_month_resolves_the_old_period_and_can_raise_for_the_new_one() -> None:
    mem = Memory([spending_limit])
    mem.add("budget", "dining", source="b", category="dining", limit=100)  # month by default
    mem.add("transaction", "t1", source="1", amount=120, date="2025-04-10", category="Dining")
    assert mem.run(NOW).only_raised().subject == "budget/dining|2025-04-01"
    out = mem.run("2025-05-01T00:00")  # the tick into May
    assert [a.subject for a in out.resolved] == ["budget/dining|2025-04-01"] and not out.raised
    mem.add("transaction", "t2", source="2", amount=90, date="2025-05-02", category="dining")
    mem.add("transaction", "t3", source="3", amount=-20, date="2025-05-03", category="dining")
    assert mem.run("2025-05-03").events == []  # a refund offsets the category
    mem.add("transaction", "t4", source="4", amount=45, date="2025-05-04", category="dining")
    alert = mem.run("2025-05-04").only_raised()
    assert alert.subject == "budget/dining|2025-05-01"
    assert alert.details["spent"] == 115.0
    assert alert.details["period_end"] == "2025-05-31"


def test_all_budgets_weeks_years_and_currencies() -> None:
    mem = Memory([spending_limit])
    mem.add("budget", "all", source="b1", category="all", limit=100, period="weekly")
    mem.add("budget", "year", source="b2", limit=1000, period="year", currency="EUR")
    mem.add("budget", "odd", source="b3", category="x", limit=1, period="fortnight")
    mem.add("transaction", "salary", source="1", amount=-5000, date="2025-04-21",
            category="income")  # income does not offset "all"
    mem.add("transaction", "a", source="2", amount=60, date="2025-04-21", category="rent")
    mem.add("transaction", "b", source="3", amount=50, date="2025-04-27", category="x")
    mem.add("transaction", "c", source="4", amount=999, date="2025-04-20", currency="eur",
            category="x")  # last week; in EUR
    mem.add("transaction", "d", source="5", amount=5, date="2025-02-01", currency="USD")
    findings = {f.subject: f for f in mem.findings(NOW)}
    assert sorted(findings) == ["budget/all|2025-04-21", "budget/year|2025-01-01"]
    assert findings["budget/all|2025-04-21"].details["spent"] == 110.0
    assert findings["budget/all|2025-04-21"].details["period_end"] == "2025-04-27"
    assert findings["budget/year|2025-01-01"].details["spent"] == 1109.0
    assert period_bounds("week", date(2025, 4, 27)) == (date(2025, 4, 21), date(2025, 4, 27))
    assert period_bounds("month", date(2024, 2, 10)) == (date(2024, 2, 1), date(2024, 2, 29))
    assert period_bounds("year", date(2025, 4, 27)) == (date(2025, 1, 1), date(2025, 12, 31))


# --- payment_destination_conflict ---------------------------------------------------------------


def test_conflicting_payment_destinations_for_one_payee_are_critical() -> None:
    mem = Memory([payment_destination_conflict])
    mem.add("payment_instruction", "acme-1", source="invoice-1", payee="ACME Corp",
            destination_account="DE89 3704 0044 0532 0130 00", amount=1200)
    mem.add("payment_instruction", "acme-2", source="invoice-2", payee="acme corp",
            destination_account="de89370400440532013000")  # the same account, spaced
    mem.add("payment_instruction", "other", source="invoice-3", payee="Globex",
            destination_account="GB29NWBK60161331926819")
    assert mem.run(NOW).events == []  # (b)
    mem.add("payment_instruction", "acme-3", source="email-7", payee="  Acme   CORP ",
            destination_account="GB94BARC10201530093459")
    alert = mem.run(NOW).only_raised()  # (a)
    assert alert.severity is Severity.CRITICAL
    assert alert.subject == "payee:acme corp"
    assert alert.details == {
        "payee": "acme corp",
        "accounts": ["DE89 3704 0044 0532 0130 00", "GB94BARC10201530093459"],
        "instructions": ["payment_instruction/acme-1", "payment_instruction/acme-2",
                         "payment_instruction/acme-3"]}
    assert alert.evidence.sources == ("email-7", "invoice-1", "invoice-2")
    assert "GB94BARC10201530093459" in alert.message
    mem.add("payment_instruction", "other", source="invoice-4", valid="2025-02-01",
            amount=10)  # (c)
    assert mem.run("2025-04-28").events == []
    # (d) the e-mail was a phishing attempt: its instruction is superseded
    mem.add("payment_instruction", "acme-1", source="call-1", valid="2025-04-28",
            supersedes=("email-7",), amount=1200)
    out = mem.run("2025-04-28")
    assert [a.subject for a in out.resolved] == ["payee:acme corp"] and not out.raised


def test_instructions_without_an_account_do_not_conflict() -> None:
    mem = Memory([payment_destination_conflict])
    mem.add("payment_instruction", "a", source="1", payee="Bob", destination_account="111")
    mem.add("payment_instruction", "b", source="2", payee="Bob", amount=4)
    mem.add("payment_instruction", "c", source="3", destination_account="222")
    assert mem.findings(NOW) == []


# --- deadline_approaching -----------------------------------------------------------------------


def test_deadline_is_raised_once_with_days_remaining_and_resolves_when_done() -> None:
    mem = Memory([deadline_approaching], days_ahead=7)
    mem.add("deadline", "taxes", source="turn-9", title="Tax return", due="2025-05-04")
    assert mem.run("2025-04-26T08:00").events == []  # (b) 8 days away
    alert = mem.run(NOW).only_raised()  # (a) 7 days away
    assert alert.subject == "deadline/taxes|2025-05-04"
    assert alert.severity is Severity.WARNING
    assert alert.message == "Tax return is due 2025-05-04 (7 days left)"
    assert alert.details == {"title": "Tax return", "deadline": "2025-05-04",
                             "days_remaining": 7}
    assert alert.evidence.entities == ("deadline/taxes",)
    assert alert.evidence.sources == ("turn-9",)
    for tick in ("2025-04-28", "2025-04-29", "2025-05-03"):  # (c) the next days' ticks
        assert mem.run(tick).events == []
    mem.add("deadline", "taxes", source="turn-10", valid="2025-05-03", done=True)  # (d)
    out = mem.run("2025-05-03T12:00")
    assert [a.subject for a in out.resolved] == [alert.subject] and not out.raised


def test_deadline_resolves_when_it_passes_and_a_moved_date_is_a_new_alert() -> None:
    mem = Memory([deadline_approaching])
    mem.add("deadline", "form", source="1", title="Form", due="2025-04-27")
    assert mem.run(NOW).only_raised().message == "Form is due 2025-04-27 (today)"
    assert len(mem.run("2025-04-28").resolved) == 1  # passed
    mem.add("deadline", "form", source="2", valid="2025-04-28", due="2025-04-29")
    alert = mem.run("2025-04-28T01:00").only_raised()
    assert alert.subject == "deadline/form|2025-04-29"
    assert alert.message == "Form is due 2025-04-29 (1 day left)"


def test_lease_notice_deadline_is_raised_with_days_left() -> None:
    mem = Memory([deadline_approaching])
    mem.add("contract", "lease", source="doc-1", title="apartment lease", kind="lease",
            end_date="2025-06-01", counterparty="Landlord Ltd")
    assert mem.run(NOW).events == []  # (b) no notice period known
    mem.add("contract", "lease", source="doc-2", valid="2025-02-01", notice_days=30)
    alert = mem.run(NOW).only_raised()  # (a) 2025-06-01 minus 30 days
    assert alert.message == "Notice for apartment lease is due 2025-05-02 (5 days left)"
    assert alert.subject == "contract/lease|notice|2025-05-02"
    assert alert.details == {
        "title": "apartment lease", "deadline": "2025-05-02", "days_remaining": 5,
        "end_date": "2025-06-01", "notice_days": 30, "counterparty": "Landlord Ltd",
        "kind": "lease"}
    assert alert.evidence.sources == ("doc-1", "doc-2")
    mem.add("purchase", "p", source="x", item="Lamp")  # (c)
    assert mem.run("2025-04-28").events == []
    assert mem.run("2025-04-30").events == []
    mem.add("contract", "lease", source="turn-3", valid="2025-04-30", notice_given=True)  # (d)
    assert [a.subject for a in mem.run("2025-04-30T10:00").resolved] == [alert.subject]


def test_contract_notice_past_or_far_is_silent() -> None:
    mem = Memory([deadline_approaching], days_ahead=3)
    mem.add("contract", "gym", source="1", title="Gym", end_date="2025-05-31", notice_days=30)
    mem.add("contract", "tv", source="2", title="TV", end_date="2025-05-01", notice_days=30)
    mem.add("deadline", "done", source="3", title="Done", due="2025-04-28", done=True)
    assert mem.findings(NOW) == []


# --- warranty_or_return_lapsing -----------------------------------------------------------------


def test_return_window_and_warranty_lapsing_are_separate_alerts() -> None:
    mem = Memory([warranty_or_return_lapsing], lapse_days_ahead=14)
    mem.add("purchase", "laptop", source="receipt-1", item="Laptop", merchant="Shop",
            purchased_on="2025-04-05", return_by="2025-05-05", warranty_until="2025-05-10")
    assert mem.run("2025-04-20").events == []  # (b) 15 and 20 days away
    out = mem.run(NOW)  # (a) 8 and 13 days away
    assert not out.failures and not out.resolved
    by_subject = {a.subject: a for a in out.raised}
    assert sorted(by_subject) == ["purchase/laptop|return|2025-05-05",
                                  "purchase/laptop|warranty|2025-05-10"]
    ret = by_subject["purchase/laptop|return|2025-05-05"]
    assert ret.severity is Severity.WARNING
    assert ret.message == "The return window for Laptop ends 2025-05-05 (8 days left)"
    assert ret.details == {"item": "Laptop", "kind": "return", "deadline": "2025-05-05",
                           "days_remaining": 8, "merchant": "Shop"}
    assert ret.evidence.sources == ("receipt-1",)
    warranty = by_subject["purchase/laptop|warranty|2025-05-10"]
    assert warranty.severity is Severity.INFO and warranty.details["days_remaining"] == 13
    mem.add("contact", "x", source="y", name="X")  # (c) and the next day's tick
    assert mem.run("2025-04-28").events == []
    mem.add("purchase", "laptop", source="turn-2", valid="2025-04-29", returned=True)  # (d)
    out = mem.run("2025-04-29")
    assert sorted(a.subject for a in out.resolved) == sorted(by_subject) and not out.raised


def test_warranty_alert_resolves_after_it_lapses() -> None:
    mem = Memory([warranty_or_return_lapsing])
    mem.add("purchase", "tv", source="1", item="TV", warranty_until="2025-04-30",
            return_by="2025-04-01")
    assert mem.run(NOW).only_raised().subject == "purchase/tv|warranty|2025-04-30"
    assert mem.run("2025-04-30").events == []
    assert len(mem.run("2025-05-01").resolved) == 1


# --- helpers ------------------------------------------------------------------------------------


def test_country_keys() -> None:
    assert country_key("United States") == country_key("USA") == country_key("us") == "us"
    assert country_key("U.K.") == country_key("Great Britain") == "gb"
    assert country_key(" Japan ") == "jp"
    assert country_key("Atlantis") == "atlantis"
    assert country_key("") is None and country_key(None) is None
