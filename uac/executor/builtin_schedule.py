"""Built-in schedule rules: overlapping commitments, deadlines and notice periods approaching."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from uac.checkpointer.state import EntityView, StateView
from uac.executor.builtin_common import (
    by_entity,
    day,
    days_left,
    flag,
    iso_time,
    midnight,
    moment,
    recheck_window,
    ref,
    text,
    whole,
)
from uac.executor.rules import EVERY_GROUP, Finding, RuleContext, rule

HORIZON = timedelta(days=365)
"""Only commitments starting within this long after ``now`` are checked for overlaps."""
DEFAULT_LENGTH = timedelta(hours=1)
"""The length of an event or commitment with no (or no sensible) end."""

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CLOCK = re.compile(r"^\s*(\d{1,2}):(\d{2})(?::\d{2})?\s*$")
_KINDS = ("appointment", "event")
WEEKLY_GROUP = "weekly"
"""The group where weekly commitments meet each other (they are in every group, too)."""
LONG_GROUP = "long"
"""The group of events longer than :data:`LONG_EVENT` (they are in every group, too)."""
LONG_EVENT = timedelta(days=62)


@dataclass(frozen=True, slots=True)
class _Slot:
    """A one-off event or appointment as a half-open UTC interval."""

    view: EntityView
    title: str
    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class _Weekly:
    """A weekly recurring commitment: weekday, start minute (UTC), length, date range."""

    view: EntityView
    title: str
    weekday: int
    minute: int
    length: timedelta
    first: date | None
    last: date | None

    def occurrences(self, lo: datetime, hi: datetime) -> Iterator[tuple[datetime, datetime]]:
        """Occurrences whose interval meets ``[lo, hi)``, in time order."""
        current = (lo - self.length).date() - timedelta(days=1)
        if self.first is not None and self.first > current:
            current = self.first
        current += timedelta(days=(self.weekday - current.weekday()) % 7)
        last = hi.date() if self.last is None else min(hi.date(), self.last)
        while current <= last:
            start = datetime(current.year, current.month, current.day, tzinfo=UTC) + timedelta(
                minutes=self.minute)
            end = start + self.length
            if start < hi and end > lo:
                yield start, end
            current += timedelta(days=7)

    def describe(self) -> str:
        end = (self.minute + int(self.length.total_seconds()) // 60) % (24 * 60)
        return (f"every {_WEEKDAYS[self.weekday].capitalize()} "
                f"{_clock(self.minute)}-{_clock(end)} UTC")


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _minute(value: str | None) -> int | None:
    match = _CLOCK.match(value or "")
    if match is None:
        return None
    hours, minutes = int(match.group(1)), int(match.group(2))
    return hours * 60 + minutes if hours < 24 and minutes < 60 else None


def _weekday(value: str | None) -> int | None:
    name = (value or "").strip().lower()
    if len(name) < 3:
        return None
    for index, full in enumerate(_WEEKDAYS):
        if full.startswith(name) or name == full + "s":
            return index
    return None


def _weekly(view: EntityView) -> _Weekly | None:
    weekday, start = _weekday(text(view, "weekday")), _minute(text(view, "start_time"))
    if weekday is None or start is None:
        return None
    end = _minute(text(view, "end_time"))
    if end is None or end == start:
        length = DEFAULT_LENGTH
    else:
        length = timedelta(minutes=(end - start) % (24 * 60))  # past midnight: next day
    return _Weekly(view, text(view, "title") or view.entity_id, weekday, start, length,
                   day(view, "starts_on"), day(view, "ends_on"))


def _interval(view: EntityView) -> tuple[datetime, datetime] | None:
    """An event's ``[start, end)``; a missing or backwards end means one hour."""
    start = moment(view, "start")
    if start is None:
        return None
    end = moment(view, "end")
    if end is None or end <= start:
        end = start + DEFAULT_LENGTH
    return start, end


def _slots(state: StateView, ctx: RuleContext) -> list[_Slot]:
    """Upcoming one-off items (starting in ``[now, now + HORIZON)``), in time order; tells
    ``ctx`` when one enters the horizon or starts (and so stops counting)."""
    slots = []
    for kind in _KINDS:
        for view in state.of_type(kind):
            interval = _interval(view)
            if interval is None:
                continue
            start, end = interval
            if start >= ctx.now + HORIZON:
                ctx.recheck_at(start - HORIZON)
            if not ctx.now <= start < ctx.now + HORIZON:
                continue
            ctx.recheck_at(start)
            slots.append(_Slot(view, text(view, "title") or view.entity_id, start, end))
    slots.sort(key=lambda s: (s.start, s.end, s.view.key))
    return slots


def _span(start: datetime, end: datetime) -> str:
    tail = end.strftime("%H:%M" if end.date() == start.date() else "%Y-%m-%d %H:%M")
    return f"{start.strftime('%Y-%m-%d %H:%M')}-{tail} UTC"


def _overlap(a: EntityView, a_title: str, a_when: str, b: EntityView, b_title: str,
             b_when: str, lo: datetime, hi: datetime) -> Finding:
    first, second = sorted(((ref(a), a_title, a_when, a.key), (ref(b), b_title, b_when, b.key)))
    return Finding(
        subject=f"{first[0]}|{second[0]}",
        message=f"'{first[1]}' ({first[2]}) overlaps '{second[1]}' ({second[2]})",
        evidence=(first[3], second[3]),
        details={
            "entities": [first[0], second[0]],
            "titles": [first[1], second[1]],
            "overlap_start": iso_time(lo),
            "overlap_end": iso_time(hi),
        },
    )


def commitment_groups(view: EntityView) -> tuple[str, ...]:
    """``group_by`` of :func:`overlapping_commitments`: one-off items by the UTC days they
    cover (two overlapping items share one), weekly ones in every group."""
    if view.entity_type == "recurring_commitment":
        return (WEEKLY_GROUP, EVERY_GROUP)
    interval = _interval(view)
    if interval is None:
        return ()
    start, end = interval
    if end - start > LONG_EVENT:
        return (LONG_GROUP, EVERY_GROUP)
    first, last = start.date(), (end - timedelta(microseconds=1)).date()
    return tuple(f"day:{(first + timedelta(days=i)).isoformat()}"
                 for i in range((last - first).days + 1))


@rule("overlapping_commitments", reads=("event", "appointment", "recurring_commitment"),
      time_based=True, group_by=commitment_groups)
def overlapping_commitments(state: StateView, ctx: RuleContext) -> list[Finding]:
    """Two upcoming events/appointments overlap, or one overlaps a weekly recurring commitment.

    Only items starting from ``now`` up to a year ahead count; a missing end
    means one hour. Recurring commitments repeat weekly at a UTC time within
    ``starts_on``..``ends_on``; two of them that meet in that year overlap too.
    """
    ctx.recheck_at(None)
    findings: list[Finding] = []
    weekly = [w for w in map(_weekly, state.of_type("recurring_commitment")) if w is not None]
    if state.group != WEEKLY_GROUP:
        slots = _slots(state, ctx)
        for i, a in enumerate(slots):
            for b in slots[i + 1:]:
                if b.start >= a.end:
                    break
                findings.append(_overlap(a.view, a.title, _span(a.start, a.end), b.view,
                                         b.title, _span(b.start, b.end), b.start,
                                         min(a.end, b.end)))
        for w in weekly:
            for slot in slots:
                hit = next(w.occurrences(slot.start, slot.end), None)
                if hit is not None:
                    findings.append(_overlap(slot.view, slot.title, _span(slot.start, slot.end),
                                             w.view, w.title, w.describe(),
                                             max(hit[0], slot.start), min(hit[1], slot.end)))
    if state.group in (None, WEEKLY_GROUP):
        findings.extend(_weekly_overlaps(weekly, ctx))
    findings.sort(key=lambda f: f.subject)
    return findings


def _weekly_overlaps(weekly: list[_Weekly], ctx: RuleContext) -> list[Finding]:
    """Pairs of weekly commitments that meet within the horizon; whether they do changes only
    when one's first date enters the horizon or its last date passes."""
    findings = []
    horizon = ctx.now + HORIZON
    for i, w in enumerate(weekly):
        for other in weekly[i + 1:]:
            found = next(((max(s, o_s), min(e, o_e))
                          for s, e in w.occurrences(ctx.now, horizon) if s >= ctx.now
                          for o_s, o_e in other.occurrences(s, e)), None)
            if found is not None:
                findings.append(_overlap(w.view, w.title, w.describe(), other.view, other.title,
                                         other.describe(), *found))
    if len(weekly) > 1:
        for w in weekly:
            if w.first is not None and midnight(w.first) - HORIZON > ctx.now:
                ctx.recheck_at(midnight(w.first) - HORIZON)
            if w.last is not None and w.last >= ctx.today:
                ctx.recheck_at(midnight(w.last + timedelta(days=1)))
    return findings


def _due(what: str, due: date, days: int) -> str:
    return f"{what} is due {due.isoformat()} ({days_left(days)})"


@rule("deadline_approaching", reads=("deadline", "contract"), time_based=True,
      group_by=by_entity)
def deadline_approaching(state: StateView, ctx: RuleContext) -> list[Finding]:
    """A deadline, or a contract's notice date (end date minus notice days), is near.

    Raised when 0 to ``days_ahead`` days remain and the deadline is not done /
    the notice not given. The subject holds the date, not the day count, so the
    alert is raised once and resolves when the date passes or the task is done.
    """
    ctx.recheck_at(None)
    findings: list[Finding] = []
    for view in state.of_type("deadline"):
        due = day(view, "due")
        if due is None or flag(view, "done") is True:
            continue
        recheck_window(ctx, due - timedelta(days=ctx.days_ahead), due)
        days = (due - ctx.today).days
        if not 0 <= days <= ctx.days_ahead:
            continue
        title = text(view, "title") or view.entity_id
        findings.append(Finding(
            subject=f"{ref(view)}|{due.isoformat()}",
            message=_due(title, due, days),
            evidence=(view.key,),
            details={"title": title, "deadline": due.isoformat(), "days_remaining": days},
        ))
    for view in state.of_type("contract"):
        end, notice = day(view, "end_date"), whole(view, "notice_days")
        if end is None or notice is None or notice < 0 or flag(view, "notice_given") is True:
            continue
        due = end - timedelta(days=notice)
        recheck_window(ctx, due - timedelta(days=ctx.days_ahead), due)
        days = (due - ctx.today).days
        if not 0 <= days <= ctx.days_ahead:
            continue
        title = text(view, "title") or view.entity_id
        findings.append(Finding(
            subject=f"{ref(view)}|notice|{due.isoformat()}",
            message=_due(f"Notice for {title}", due, days),
            evidence=(view.key,),
            details={
                "title": title,
                "deadline": due.isoformat(),
                "days_remaining": days,
                "end_date": end.isoformat(),
                "notice_days": notice,
                "counterparty": text(view, "counterparty"),
                "kind": text(view, "kind"),
            },
        ))
    return findings

