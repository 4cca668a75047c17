"""Travel: trips and travel documents (passports, visas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from uac.domains.catalog import entity, meta


@entity("trip", domain="travel", table="trips", key=("destination", "start_date"))
@dataclass(frozen=True, slots=True)
class Trip:
    """A journey, past or planned."""

    destination: str | None = field(default=None, metadata=meta("city or place"))
    country: str | None = field(default=None, metadata=meta("destination country (ISO code or name)"))
    start_date: date | None = field(default=None, metadata=meta("departure date"))
    end_date: date | None = field(default=None, metadata=meta("return date"))
    international: bool | None = field(default=None, metadata=meta("crosses a border"))
    purpose: str | None = field(default=None, metadata=meta("business | leisure | ..."))
    cost: float | None = field(default=None, metadata=meta("total cost", unit="currency"))
    currency: str | None = field(default=None, metadata=meta("ISO currency code"))


@entity("passport", domain="travel", table="passports", key=("country",))
@dataclass(frozen=True, slots=True)
class Passport:
    """A passport the user holds."""

    country: str | None = field(default=None, metadata=meta("issuing country"))
    number: str | None = field(default=None, metadata=meta("document number"))
    issued_on: date | None = field(default=None, metadata=meta("issue date"))
    expiry_date: date | None = field(default=None, metadata=meta("expiry date"))


@entity("visa", domain="travel", table="visas", key=("country", "valid_from"))
@dataclass(frozen=True, slots=True)
class Visa:
    """A visa for entering a country."""

    country: str | None = field(default=None, metadata=meta("country it admits to"))
    entries: str | None = field(default=None, metadata=meta("single | multiple"))
    valid_from: date | None = field(default=None, metadata=meta("first valid day"))
    valid_until: date | None = field(default=None, metadata=meta("last valid day"))
    used_on: date | None = field(default=None, metadata=meta("date of an entry already made"))
