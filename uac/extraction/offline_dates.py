"""Dates, clock times, durations, numbers and amounts in plain English. Pure: no I/O, no clock.

Everything is resolved against a reference date (the turn's UTC date), never the wall clock.
Conventions:

- a month and day without a year is the next such day on or after the reference date when
  ``future`` (plans, expiries, deadlines), else the last one on or before it (spending);
- ``on Friday``/``this Friday``/``Friday`` is the first Friday after the reference date (a
  week later if it is a Friday; the last one before it when not ``future``); ``next Friday``
  is the Friday of the following Monday-first calendar week (said on Tuesday 2025-03-04:
  ``on Friday`` is 2025-03-07, ``next Friday`` 2025-03-14); ``last Friday`` the one before;
- ``on the 14th`` is the next 14th (this month's if not yet past), or the last one when not
  ``future``; ``in three weeks``/``10 days ago`` count from the reference date;
- clock times are UTC (the offline model knows no time zone); a range's missing am/pm is
  taken from the other end (``6 to 7pm`` is 18:00-19:00, ``11 to 1pm`` 11:00-13:00).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

NUMBER_WORDS: dict[str, int] = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "ninety": 90,
}
NUMBER = r"(?:\d+|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")"
"""A regex for a count: digits or a number word (``a``/``an`` count as one)."""
MONTHS: dict[str, int] = {
    name: index for index, month in enumerate(calendar.month_name) if month
    for name in (month.lower(), month.lower()[:3])
} | {"sept": 9}
MONTH = r"(?:january|february|march|april|may|june|july|august|september|october|november|" \
        r"december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)"
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
WEEKDAY = r"(?:" + "|".join(WEEKDAYS) + r")"
_UNIT_DAYS = {"day": 1, "week": 7}
_ORD = r"(?:st|nd|rd|th)?"


def count(word: str) -> int | None:
    """``"3"`` or ``"three"`` -> 3; None for anything else."""
    word = word.lower()
    return int(word) if word.isdigit() else NUMBER_WORDS.get(word)


def add_months(start: date, months: int) -> date:
    """``start`` plus calendar months, the day clamped to the target month's length."""
    index = start.year * 12 + start.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(start.day, calendar.monthrange(year, month + 1)[1]))


def shift(start: date, amount: int, unit: str) -> date | None:
    """``start`` moved by ``amount`` days, weeks, months or years (negative: back); None past
    the calendar's range."""
    unit = unit.lower().rstrip("s")
    try:
        if unit in _UNIT_DAYS:
            return start + timedelta(days=amount * _UNIT_DAYS[unit])
        return add_months(start, amount * (12 if unit == "year" else 1))
    except (ValueError, OverflowError):
        return None


def _safe(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def month_day(month: int, day: int, year: int | None, ref: date, future: bool) -> date | None:
    """A month and day; without a year, the next (``future``) or last occurrence."""
    if year is not None:
        return _safe(year, month, day)
    for offset in ((0, 1, 2, 3, 4) if future else (0, -1, -2, -3, -4)):
        found = _safe(ref.year + offset, month, day)
        if found is not None and (found >= ref if future else found <= ref):
            return found
    return None


def day_of_month(day: int, ref: date, future: bool) -> date | None:
    """``the 14th``: this month's if not past (``future``), else the next month with one."""
    step = 1 if future else -1
    for offset in range(0, 3 * step, step):
        first = add_months(ref.replace(day=1), offset)
        found = _safe(first.year, first.month, day)
        if found is not None and (found >= ref if future else found <= ref):
            return found
    return None


def weekday_date(name: str, which: str, ref: date, future: bool) -> date:
    """A weekday: ``next`` (the following calendar week), ``last``, or the nearest one."""
    target = WEEKDAYS.index(name.lower())
    if which == "next":
        return ref - timedelta(days=ref.weekday()) + timedelta(days=7 + target)
    if which == "last" or not future:
        return ref - timedelta(days=(ref.weekday() - target - 1) % 7 + 1)
    return ref + timedelta(days=(target - ref.weekday() - 1) % 7 + 1)


@dataclass(frozen=True, slots=True)
class Found:
    """A date (or clock minute, duration ...) found in a text, with its span."""

    start: int
    end: int
    value: date


_Resolver = Callable[[re.Match[str], date, bool], date | None]


def _iso(m: re.Match[str], ref: date, future: bool) -> date | None:
    return _safe(int(m["y"]), int(m["m"]), int(m["d"]))


def _md(m: re.Match[str], ref: date, future: bool) -> date | None:
    year = int(m["y"]) if m["y"] else None
    return month_day(MONTHS[m["mon"].lower()], int(m["d"]), year, ref, future)


def _word(m: re.Match[str], ref: date, future: bool) -> date | None:
    word = " ".join(m[0].lower().split())
    offsets = {"the day after tomorrow": 2, "tomorrow": 1, "the day before yesterday": -2,
               "yesterday": -1}
    return ref + timedelta(days=offsets.get(word, 0))


def _weekday(m: re.Match[str], ref: date, future: bool) -> date | None:
    return weekday_date(m["wd"], (m["which"] or "").lower(), ref, future)


def _relative(m: re.Match[str], ref: date, future: bool) -> date | None:
    amount = count(m["n"])
    if amount is None:
        return None
    return shift(ref, -amount if m["ago"] else amount, m["unit"])


def _nth(m: re.Match[str], ref: date, future: bool) -> date | None:
    return day_of_month(int(m["d"]), ref, future)


_DATE_PATTERNS: tuple[tuple[re.Pattern[str], _Resolver], ...] = tuple(
    (re.compile(p, re.IGNORECASE), r) for p, r in (
        (r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b", _iso),
        (rf"\b(?P<mon>{MONTH})\.?\s+(?P<d>\d{{1,2}}){_ORD}\b(?:,?\s+(?P<y>\d{{4}})\b)?", _md),
        (rf"\b(?:the\s+)?(?P<d>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<mon>{MONTH})\b\.?"
         rf"(?:,?\s+(?P<y>\d{{4}})\b)?", _md),
        (r"\b(?:the\s+day\s+after\s+tomorrow|the\s+day\s+before\s+yesterday|today|tonight|"
         r"tomorrow|yesterday|this\s+(?:morning|afternoon|evening))\b", _word),
        (rf"(?<!every )\b(?:(?P<which>next|this|last|on|coming)\s+)?(?P<wd>{WEEKDAY})\b(?!s)",
         _weekday),
        (rf"\b(?:(?P<in>in)\s+)?(?P<n>{NUMBER})\s+(?P<unit>day|week|month|year)s?\b"
         rf"(?:\s+(?P<ago>ago)|\s+(?P<now>from\s+now))?", _relative),
        (r"\b(?:the\s+)?(?P<d>\d{1,2})(?:st|nd|rd|th)\b", _nth),
    )
)


def find_dates(text: str, ref: date, future: bool = True) -> list[Found]:
    """Every date in ``text``, in text order; earlier patterns win overlaps.

    ``in 10 days``/``10 days ago`` count only with ``in``/``ago``; bare durations do not.
    """
    found: list[Found] = []
    for pattern, resolve in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            if resolve is _relative and not (m["in"] or m["ago"] or m["now"]):
                continue
            if any(m.start() < f.end and f.start < m.end() for f in found):
                continue
            try:
                value = resolve(m, ref, future)
            except (ValueError, OverflowError):  # past year 9999
                value = None
            if value is not None:
                found.append(Found(m.start(), m.end(), value))
    return sorted(found, key=lambda f: f.start)


def first_date(text: str, ref: date, future: bool = True) -> date | None:
    dates = find_dates(text, ref, future)
    return dates[0].value if dates else None


_MER = r"(?:a\.?m\.?|p\.?m\.?)"


def _clock_re(tag: str) -> str:
    """A clock time with groups ``<tag>h`` (hour), ``<tag>m`` (minute), ``<tag>p`` (am/pm)."""
    return (rf"(?P<{tag}h>\d{{1,2}})(?::(?P<{tag}m>\d{{2}}))?\s*(?P<{tag}p>{_MER})?"
            r"(?![\w:])")


_RANGE = re.compile(
    rf"\b(?:from\s+|between\s+)?{_clock_re('s')}\s*(?:to|-|–|until|till|and)\s*"
    rf"{_clock_re('e')}", re.IGNORECASE)
_SINGLE = re.compile(rf"(?:\bat\s+)?\b{_clock_re('s')}|\b(?:at\s+)?(?P<noon>noon|midnight)\b",
                     re.IGNORECASE)


def _minutes(hour: str, minute: str | None, meridiem: str | None) -> int | None:
    h, mi = int(hour), int(minute or 0)
    if meridiem:
        if not 1 <= h <= 12:
            return None
        h = h % 12 + (12 if meridiem.lower().startswith("p") else 0)
    return h * 60 + mi if h < 24 and mi < 60 else None


def _range(m: re.Match[str]) -> tuple[int, int] | None:
    """A range's minutes; a missing am/pm is the other end's (or the opposite, if earlier)."""
    sp, ep = m["sp"] or m["ep"], m["ep"] or m["sp"]
    start, end = _minutes(m["sh"], m["sm"], sp), _minutes(m["eh"], m["em"], ep)
    if start is None or end is None:
        return None
    if m["ep"] and not m["sp"] and start > end:
        start = _minutes(m["sh"], m["sm"], "am" if m["ep"].lower().startswith("p") else "pm")
    return None if start is None else (start, end)


def find_time_range(text: str) -> tuple[int, int | None, int] | None:
    """The first clock time or range: (start minute, end minute or None, text position).

    A bare number counts only with am/pm, a colon, or ``at``; ranges need am/pm or a colon.
    """
    for m in _RANGE.finditer(text):
        if m["sp"] or m["ep"] or m["sm"] or m["em"]:
            found = _range(m)
            if found is not None:
                return found[0], found[1], m.start()
    for m in _SINGLE.finditer(text):
        if m["noon"]:
            return (12 * 60 if m["noon"].lower() == "noon" else 0), None, m.start()
        if not (m["sp"] or m["sm"] or m[0].lower().startswith("at")):
            continue
        start = _minutes(m["sh"], m["sm"], m["sp"])
        if start is not None:
            return start, None, m.start()
    return None


def clock(minute: int) -> str:
    """Minutes after midnight -> ``HH:MM``."""
    return f"{minute // 60:02d}:{minute % 60:02d}"


_DURATION = re.compile(rf"\b(?P<n>{NUMBER})[\s-]+(?P<unit>day|week|month|year)s?\b", re.IGNORECASE)


def find_duration(text: str) -> tuple[int, str] | None:
    """The first duration: ``two years``/``2-year``/``a year`` -> (2, "year")."""
    for m in _DURATION.finditer(text):
        amount = count(m["n"])
        if amount is not None:
            return amount, m["unit"].lower()
    return None


_MONEY = re.compile(
    r"(?P<sym>[$€£])\s?(?P<n1>\d[\d,]*(?:\.\d+)?)"
    r"|\b(?P<n2>\d[\d,]*(?:\.\d+)?)\s?(?P<code>usd|eur|gbp|chf|jpy|cad|aud|dollars?|bucks|"
    r"euros?|pounds?|yen)\b"
    r"|\b(?P<code2>usd|eur|gbp|chf|jpy|cad|aud)\s?(?P<n3>\d[\d,]*(?:\.\d+)?)",
    re.IGNORECASE)
_CURRENCIES = {"$": "USD", "€": "EUR", "£": "GBP", "dollar": "USD", "buck": "USD",
               "euro": "EUR", "pound": "GBP", "yen": "JPY"}


@dataclass(frozen=True, slots=True)
class Money:
    """An amount of money found in a text."""

    start: int
    end: int
    amount: float | int
    currency: str


def find_money(text: str) -> list[Money]:
    """Every amount with a currency (``$349``, ``1450 EUR``, ``€1,450.50``, ``300 dollars``)."""
    out = []
    for m in _MONEY.finditer(text):
        raw = (m["n1"] or m["n2"] or m["n3"]).replace(",", "")
        code = (m["sym"] or m["code"] or m["code2"]).lower().rstrip("s")
        currency = _CURRENCIES.get(code, code.upper())
        value = float(raw)
        out.append(Money(m.start(), m.end(), int(value) if value.is_integer() else value,
                         currency))
    return out


Spec = dict[str, int]
"""Part of a date or time: any of ``year``, ``month``, ``day``, ``minute`` (of the day)."""
_FRAGMENTS = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"\b(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})\b",
    rf"\b(?P<month>{MONTH})\.?\s+(?P<day>\d{{1,2}}){_ORD}\b(?:,?\s+(?P<year>\d{{4}})\b)?",
    rf"\b(?P<day>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<month>{MONTH})\b(?:,?\s+(?P<year>\d{{4}})\b)?",
    rf"\b(?P<month>{MONTH})\s+(?P<year>\d{{4}})\b",
    rf"\b{_clock_re('s')}",
    r"\b(?P<day>\d{1,2})(?:st|nd|rd|th)\b",
    r"\b(?P<year>(?:19|20)\d{2})\b",
    rf"\b(?P<month>{MONTH})\b",
))


def _spec(m: re.Match[str]) -> Spec | None:
    groups = {k: v for k, v in m.groupdict().items() if v}
    if "sh" in groups:
        if not (groups.get("sp") or groups.get("sm")):
            return None
        minute = _minutes(groups["sh"], groups.get("sm"), groups.get("sp"))
        return None if minute is None else {"minute": minute}
    spec = {k: int(v) if v.isdigit() else MONTHS[v.lower()] for k, v in groups.items()}
    return spec if 1 <= spec.get("month", 1) <= 12 and 1 <= spec.get("day", 1) <= 31 else None


def find_fragments(text: str) -> list[tuple[int, int, Spec]]:
    """Dates and times as said, unresolved (``the 14th`` -> ``{"day": 14}``, ``2030`` ->
    ``{"year": 2030}``, ``4pm`` -> ``{"minute": 960}``), in text order; for corrections."""
    found: list[tuple[int, int, Spec]] = []
    for pattern in _FRAGMENTS:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end, _ in found):
                continue
            spec = _spec(m)
            if spec:
                found.append((m.start(), m.end(), spec))
    return sorted(found, key=lambda item: item[0])
