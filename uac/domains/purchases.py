"""Purchases: items bought, their warranties and return windows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from uac.domains.catalog import entity, meta


@entity("purchase", domain="purchases", table="purchases", key=("item", "purchased_on"))
@dataclass(frozen=True, slots=True)
class Purchase:
    """Something the user bought."""

    item: str | None = field(default=None, metadata=meta("what was bought"))
    price: float | None = field(default=None, metadata=meta("price", unit="currency"))
    currency: str | None = field(default=None, metadata=meta("ISO currency code"))
    purchased_on: date | None = field(default=None, metadata=meta("purchase date"))
    merchant: str | None = field(default=None, metadata=meta("shop"))
    warranty_until: date | None = field(default=None, metadata=meta("last day of warranty"))
    return_by: date | None = field(default=None, metadata=meta("last day to return"))
    returned: bool | None = field(default=None, metadata=meta("already returned"))
