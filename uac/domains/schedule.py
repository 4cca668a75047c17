"""Schedule: events, recurring commitments, deadlines, contracts with notice periods."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime

from uac.domains.catalog import entity, meta


@entity("event", domain="schedule", table="events", key=("title", "start"))
@dataclass(frozen=True, slots=True)
class Event:
    """A one-off calendar event."""

    title: str | None = field(default=None, metadata=meta("what it is"))
    start: datetime | None = field(default=None, metadata=meta("start time"))
    end: datetime | None = field(default=None, metadata=meta("end time"))
    location: str | None = field(default=None, metadata=meta("where"))


@entity("recurring_commitment", domain="schedule", table="recurring_commitments", key=("title",))
@dataclass(frozen=True, slots=True)
class RecurringCommitment:
    """Something that repeats every week on a weekday at a time (UTC)."""

    title: str | None = field(default=None, metadata=meta("what it is"))
    weekday: str | None = field(default=None, metadata=meta("monday .. sunday"))
    start_time: str | None = field(default=None, metadata=meta("HH:MM"))
    end_time: str | None = field(default=None, metadata=meta("HH:MM"))
    starts_on: date | None = field(default=None, metadata=meta("first occurrence on or after"))
    ends_on: date | None = field(default=None, metadata=meta("no occurrence after"))


@entity("deadline", domain="schedule", table="deadlines", key=("title",))
@dataclass(frozen=True, slots=True)
class Deadline:
    """Something that must be done by a date."""

    title: str | None = field(default=None, metadata=meta("what is due"))
    due: date | None = field(default=None, metadata=meta("due date"))
    done: bool | None = field(default=None, metadata=meta("already done"))


@entity("contract", domain="schedule", table="contracts", key=("title",))
@dataclass(frozen=True, slots=True)
class Contract:
    """A contract with an end date and a notice period (a lease, a subscription)."""

    title: str | None = field(default=None, metadata=meta("e.g. apartment lease"))
    kind: str | None = field(default=None, metadata=meta("lease | subscription | ..."))
    end_date: date | None = field(default=None, metadata=meta("when it ends or renews"))
    notice_days: int | None = field(default=None, metadata=meta("notice period", unit="days"))
    counterparty: str | None = field(default=None, metadata=meta("landlord, provider"))
    notice_given: bool | None = field(default=None, metadata=meta("notice already given"))
