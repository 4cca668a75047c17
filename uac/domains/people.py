"""People: contacts and relationships; preferences."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from uac.domains.catalog import entity, meta


@entity("contact", domain="people", table="contacts", key=("name",))
@dataclass(frozen=True, slots=True)
class Contact:
    """A person the user knows."""

    name: str | None = field(default=None, metadata=meta("the person's name"))
    relationship: str | None = field(default=None, metadata=meta("sister, colleague, doctor ..."))
    phone: str | None = field(default=None, metadata=meta("phone number"))
    email: str | None = field(default=None, metadata=meta("email address"))
    birthday: date | None = field(default=None, metadata=meta("date of birth"))


@entity("preference", domain="preferences", table="preferences", key=("topic",))
@dataclass(frozen=True, slots=True)
class Preference:
    """Something the user likes, dislikes or wants."""

    topic: str | None = field(default=None, metadata=meta("e.g. seat, cuisine"))
    value: str | None = field(default=None, metadata=meta("e.g. aisle, vegetarian"))
    sentiment: str | None = field(default=None, metadata=meta("likes | dislikes | needs"))


@entity("entity", domain="generic", table="generic_entities", key=())
@dataclass(frozen=True, slots=True)
class GenericEntity:
    """Anything no domain model describes; every attribute is kept in ``extra``."""

    kind: str | None = field(default=None, metadata=meta("what sort of thing it is"))
    name: str | None = field(default=None, metadata=meta("a label"))
    extra: dict | None = field(default=None, metadata=meta("all other attributes"))  # type: ignore[type-arg]
