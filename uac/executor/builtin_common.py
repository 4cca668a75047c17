"""Helpers shared by the built-in rules: typed field access, dates, text normalisation.

The rules read state only through ``StateView.of_type``/``entity`` and an entity
view's ``entity_type``, ``entity_id``, ``key``, ``model`` and ``attributes``; the
helpers here read one field of ``view.model`` and return it only if it has the
expected type, so a rule never crashes on an odd value (it treats it as unknown).
"""

from __future__ import annotations

import calendar
import math
import re
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from uac.checkpointer.state import EntityView


class _Clock(Protocol):
    """The part of a rule context the recheck helpers use."""

    @property
    def today(self) -> date: ...

    def recheck_at(self, when: datetime | None) -> None: ...

_WORD = re.compile(r"[a-z0-9]+")


def text(view: EntityView, name: str) -> str | None:
    """A text field, stripped; None if unset, empty or not text."""
    value = getattr(view.model, name, None)
    if isinstance(value, str):
        value = value.strip()
        return value or None
    return None


def day(view: EntityView, name: str) -> date | None:
    """A date field (a datetime is cut to its UTC date); None if unset or not a date."""
    value = getattr(view.model, name, None)
    if isinstance(value, datetime):
        return as_utc(value).date()
    if isinstance(value, date):
        return value
    return None


def moment(view: EntityView, name: str) -> datetime | None:
    """A datetime field as aware UTC (a bare date means midnight UTC); None if unset."""
    value = getattr(view.model, name, None)
    if isinstance(value, datetime):
        return as_utc(value)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    return None


def flag(view: EntityView, name: str) -> bool | None:
    """A boolean field; None if unset or not a boolean."""
    value = getattr(view.model, name, None)
    return value if isinstance(value, bool) else None


def number(view: EntityView, name: str) -> float | None:
    """A finite numeric field as a float; None if unset or not a number."""
    value = getattr(view.model, name, None)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def whole(view: EntityView, name: str) -> int | None:
    """An integer field (an integral float is accepted); None if unset or not whole."""
    value = number(view, name)
    if value is None or not value.is_integer():
        return None
    return int(value)


def as_utc(value: datetime) -> datetime:
    """An aware UTC datetime (a naive one is taken to be UTC already)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def iso_time(value: datetime) -> str:
    """Canonical text of a time: UTC with a ``Z`` suffix."""
    return as_utc(value).isoformat().replace("+00:00", "Z")


def words(value: str | None) -> tuple[str, ...]:
    """Lower-case alphanumeric words: ``"Amoxicillin-Clavulanate 875mg"`` ->
    ``("amoxicillin", "clavulanate", "875mg")``."""
    return tuple(_WORD.findall(value.lower())) if value else ()


def contains_run(haystack: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as consecutive words."""
    size = len(needle)
    if size == 0 or size > len(haystack):
        return False
    return any(haystack[i:i + size] == needle for i in range(len(haystack) - size + 1))


def normalized(value: str) -> str:
    """Case- and whitespace-insensitive form of a name: lower case, single spaces."""
    return " ".join(value.lower().split())


def ref(view: EntityView) -> str:
    """``type/id`` of an entity, as used in subjects and details."""
    return f"{view.entity_type}/{view.entity_id}"


def by_entity(view: EntityView) -> tuple[str]:
    """``group_by`` for rules that judge each entity on its own: one group per entity."""
    return (ref(view),)


def midnight(value: date) -> datetime:
    """The start (UTC) of a day: when a date comparison against ``ctx.today`` can flip."""
    return datetime(value.year, value.month, value.day, tzinfo=UTC)


def recheck_window(ctx: _Clock, first: date, last: date) -> None:
    """Tell ``ctx`` when "``first`` <= today <= ``last``" next changes: at ``first``, or the
    day after ``last`` (never, once ``last`` is past)."""
    today = ctx.today
    if today < first:
        ctx.recheck_at(midnight(first))
    elif today <= last:
        ctx.recheck_at(midnight(last + timedelta(days=1)))


def add_months(start: date, months: int) -> date:
    """``start`` plus calendar months, the day clamped to the target month's length."""
    index = start.year * 12 + (start.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    return date(year, month, min(start.day, calendar.monthrange(year, month)[1]))


def days_left(days: int) -> str:
    """``"today"``, ``"1 day left"`` or ``"N days left"``."""
    if days == 0:
        return "today"
    return "1 day left" if days == 1 else f"{days} days left"


def iso_or_none(value: date | None) -> str | None:
    return value.isoformat() if value is not None else None


_COUNTRY_ALIASES: dict[str, tuple[str, ...]] = {
    "ae": ("uae", "united arab emirates"),
    "ar": ("argentina",),
    "at": ("austria",),
    "au": ("australia",),
    "be": ("belgium",),
    "br": ("brazil",),
    "ca": ("canada",),
    "ch": ("switzerland",),
    "cn": ("china", "prc"),
    "de": ("germany", "deutschland", "deu"),
    "dk": ("denmark",),
    "eg": ("egypt",),
    "es": ("spain", "espana"),
    "fr": ("france", "fra"),
    "gb": ("uk", "u k", "united kingdom", "great britain", "britain", "england", "scotland",
           "wales", "gbr"),
    "gr": ("greece",),
    "id": ("indonesia",),
    "ie": ("ireland",),
    "il": ("israel",),
    "in": ("india", "ind"),
    "it": ("italy", "ita"),
    "jp": ("japan", "jpn"),
    "kr": ("south korea", "korea", "republic of korea"),
    "mx": ("mexico",),
    "nl": ("netherlands", "the netherlands", "holland"),
    "no": ("norway",),
    "nz": ("new zealand",),
    "pl": ("poland",),
    "pt": ("portugal",),
    "ru": ("russia", "russian federation"),
    "se": ("sweden",),
    "sg": ("singapore",),
    "th": ("thailand",),
    "tr": ("turkey", "turkiye"),
    "us": ("usa", "u s", "u s a", "united states", "united states of america", "america"),
    "vn": ("vietnam", "viet nam"),
    "za": ("south africa",),
}
_COUNTRY_KEYS = {alias: code for code, names in _COUNTRY_ALIASES.items() for alias in names}


def country_key(value: str | None) -> str | None:
    """A comparable form of a country: ISO code for common names ("USA", "United States" ->
    ``us``), otherwise the lower-cased words. None for no country."""
    joined = " ".join(words(value))
    if not joined:
        return None
    return _COUNTRY_KEYS.get(joined, joined)

