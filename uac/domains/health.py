"""Health: allergies, medications, conditions, appointments."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime

from uac.domains.catalog import entity, meta


@entity("allergy", domain="health", table="allergies", key=("substance",))
@dataclass(frozen=True, slots=True)
class Allergy:
    """Something the user is allergic to (a drug, a drug class, a food)."""

    substance: str | None = field(default=None, metadata=meta("allergen, e.g. penicillin"))
    reaction: str | None = field(default=None, metadata=meta("what happens, e.g. hives"))
    severity: str | None = field(default=None, metadata=meta("mild | moderate | severe"))
    noted_on: date | None = field(default=None, metadata=meta("when it was recorded"))


@entity("medication", domain="health", table="medications", key=("name",))
@dataclass(frozen=True, slots=True)
class Medication:
    """A drug the user takes or was prescribed."""

    name: str | None = field(default=None, metadata=meta("drug name, e.g. amoxicillin"))
    dose: str | None = field(default=None, metadata=meta("dose text, e.g. 500 mg"))
    drug_class: str | None = field(default=None, metadata=meta("class if known, e.g. penicillin"))
    prescribed_on: date | None = field(default=None, metadata=meta("prescription date"))
    prescriber: str | None = field(default=None, metadata=meta("who prescribed it"))
    status: str | None = field(default=None, metadata=meta("active | stopped"))


@entity("condition", domain="health", table="conditions", key=("name",))
@dataclass(frozen=True, slots=True)
class Condition:
    """A diagnosed condition."""

    name: str | None = field(default=None, metadata=meta("condition name"))
    diagnosed_on: date | None = field(default=None, metadata=meta("diagnosis date"))
    status: str | None = field(default=None, metadata=meta("active | resolved"))


@entity("appointment", domain="health", table="appointments", key=("title", "start"))
@dataclass(frozen=True, slots=True)
class Appointment:
    """A medical appointment (also checked for overlaps with other commitments)."""

    title: str | None = field(default=None, metadata=meta("what it is"))
    start: datetime | None = field(default=None, metadata=meta("start time"))
    end: datetime | None = field(default=None, metadata=meta("end time"))
    provider: str | None = field(default=None, metadata=meta("doctor or clinic"))
    location: str | None = field(default=None, metadata=meta("where"))
