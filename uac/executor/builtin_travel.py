"""Built-in travel rules: passport validity for a trip, a single-entry visa already used."""

from __future__ import annotations

from datetime import date, timedelta

from uac.checkpointer.state import EntityView, StateView
from uac.executor.builtin_common import (
    add_months,
    country_key,
    day,
    flag,
    iso_or_none,
    midnight,
    ref,
    text,
    words,
)
from uac.executor.rules import EVERY_GROUP, Finding, RuleContext, rule

PASSPORT_MONTHS = 6
"""How long a passport must stay valid after the return date (the common six-month rule)."""


def _trip_country(trip: EntityView) -> str | None:
    return country_key(text(trip, "country"))


def _trip_name(trip: EntityView) -> str:
    return text(trip, "destination") or text(trip, "country") or trip.entity_id


def _international(trip: EntityView, passports: list[EntityView]) -> bool:
    """Explicitly international, or to a country none of the user's passports is from."""
    explicit = flag(trip, "international")
    if explicit is not None:
        return explicit
    destination = _trip_country(trip)
    homes = {country_key(text(p, "country")) for p in passports} - {None}
    return destination is not None and bool(homes) and destination not in homes


def trip_groups(view: EntityView) -> tuple[str, ...]:
    """``group_by`` of :func:`passport_validity`: each trip on its own, passports in every group."""
    return (EVERY_GROUP,) if view.entity_type == "passport" else (ref(view),)


@rule("passport_validity", reads=("trip", "passport"), time_based=True, requires=("passport",),
      group_by=trip_groups)
def passport_validity(state: StateView, ctx: RuleContext) -> list[Finding]:
    """An upcoming international trip with no passport valid six months past the return date.

    Only trips not yet over (return date, else departure date, on or after
    today) count. No passport on record, or one of unknown expiry, means we do
    not know, so nothing is raised; a passport of the destination country is enough.
    """
    ctx.recheck_at(None)
    findings: list[Finding] = []
    passports = state.of_type("passport")
    if not passports:
        return findings
    expiries = [(day(p, "expiry_date"), p) for p in passports]
    known = [(expiry, p) for expiry, p in expiries if expiry is not None]
    if len(known) < len(expiries):
        return findings
    expiry, best = max(known, key=lambda item: item[0])
    for trip in state.of_type("trip"):
        start, end = day(trip, "start_date"), day(trip, "end_date")
        back = end or start
        if back is None or back < ctx.today or not _international(trip, passports):
            continue
        ctx.recheck_at(midnight(back + timedelta(days=1)))  # over: no longer counts
        destination = _trip_country(trip)
        if destination is not None and any(
                country_key(text(p, "country")) == destination for p in passports):
            continue
        required = add_months(back, PASSPORT_MONTHS)
        if expiry >= required:
            continue
        dates = f"{start} to {back}" if start and start != back else f"on {back}"
        findings.append(Finding(
            subject=ref(trip),
            message=(f"Your passport expires {expiry.isoformat()}, but your trip to "
                     f"{_trip_name(trip)} ({dates}) needs one valid until "
                     f"{required.isoformat()} (six months after your return)"),
            evidence=(trip.key, *(p.key for p in passports)),
            details={
                "expiry_date": expiry.isoformat(),
                "passport": ref(best),
                "trip_start": iso_or_none(start),
                "trip_end": back.isoformat(),
                "required_until": required.isoformat(),
                "destination": _trip_name(trip),
            },
        ))
    return findings


def _single_entry(visa: EntityView) -> bool:
    return "single" in words(text(visa, "entries"))


def _trip_place(trip: EntityView) -> str | None:
    return _trip_country(trip) or country_key(text(trip, "destination"))


def visa_groups(view: EntityView) -> tuple[str, ...]:
    """``group_by`` of :func:`single_entry_visa_used`: by country."""
    country = (country_key(text(view, "country")) if view.entity_type == "visa"
               else _trip_place(view))
    return (country,) if country is not None else ()


@rule("single_entry_visa_used", reads=("visa", "trip"), time_based=True, requires=("visa",),
      group_by=visa_groups)
def single_entry_visa_used(state: StateView, ctx: RuleContext) -> list[Finding]:
    """An upcoming trip relies on a single-entry visa that was already used.

    The visa counts as used if ``used_on`` is before the trip, or if a past trip
    (started before today) to the same country began inside the visa's validity.
    The upcoming trip (starting today or later) must also begin inside it.
    """
    ctx.recheck_at(None)
    findings: list[Finding] = []
    trips: list[tuple[date, str, EntityView]] = []
    for trip in state.of_type("trip"):
        start = day(trip, "start_date")
        country = _trip_place(trip)
        if start is not None and country is not None:
            trips.append((start, country, trip))
    trips.sort(key=lambda item: (item[0], item[2].entity_id))
    for visa in state.of_type("visa"):
        country = country_key(text(visa, "country"))
        if country is None or not _single_entry(visa):
            continue
        valid_from, valid_until = day(visa, "valid_from"), day(visa, "valid_until")
        inside = [
            (start, trip) for start, where, trip in trips
            if where == country and (valid_from is None or start >= valid_from)
            and (valid_until is None or start <= valid_until)
        ]
        past = [trip for start, trip in inside if start < ctx.today]
        used_on = day(visa, "used_on")
        for start, trip in inside:
            if start < ctx.today:
                continue
            ctx.recheck_at(midnight(start + timedelta(days=1)))  # then it is a past trip
            used_before = used_on is not None and used_on < start
            if not used_before and not past:
                continue
            how = (f"on {used_on.isoformat()}" if used_on is not None and used_before
                   else f"on your trip to {_trip_name(past[-1])}")
            findings.append(Finding(
                subject=f"{ref(visa)}|{ref(trip)}",
                message=(f"Your single-entry visa for {text(visa, 'country')} was already used "
                         f"{how}; your trip to {_trip_name(trip)} on {start.isoformat()} "
                         f"needs a new visa"),
                evidence=(visa.key, trip.key, *(p.key for p in past)),
                details={
                    "country": text(visa, "country"),
                    "used_on": iso_or_none(used_on),
                    "previous_trips": [ref(p) for p in past],
                    "trip_start": start.isoformat(),
                    "valid_from": iso_or_none(valid_from),
                    "valid_until": iso_or_none(valid_until),
                },
            ))
    return findings
