"""Offline-model parsers for the schedule (appointments, events, weekly commitments, deadlines,
contracts with notice periods) and people (contacts, preferences). Pure."""

from __future__ import annotations

import re
from datetime import date, timedelta

from uac.extraction.offline_dates import (
    NUMBER,
    WEEKDAY,
    WEEKDAYS,
    clock,
    count,
    find_dates,
    find_time_range,
)
from uac.extraction.offline_memory import (
    I_AM,
    NAME,
    Context,
    Draft,
    Sentence,
    affirmed,
    clean_phrase,
    content_words,
    make_fact,
    update,
    words,
)

_I = re.IGNORECASE
_UNTIL_NEXT = r"(?=\s+(?:on|at|this|next|tomorrow|tonight|today|from|in|every|with\s+Dr)\b|[,.;!?]|$)"
_PROVIDER = re.compile(rf"\bwith\s+(?P<who>(?:Dr\.?|Doctor)\s+(?-i:[A-Z][\w'-]+)|{NAME})", _I)
_LOCATION = re.compile(rf"\bat\s+(?P<at>(?:the\s+)?{NAME})")


def stamp(day: date, minute: int | None = None) -> str:
    """A date and optional minute of the day as ``YYYY-MM-DDTHH:MM:SSZ`` (midnight if none)."""
    return f"{day.isoformat()}T{clock(minute or 0)}:00Z"


def _when(text: str, today: date) -> tuple[str, str | None] | None:
    """Start and end datetimes from the first date and clock time (range) of ``text``."""
    dates = find_dates(text, today)
    if not dates:
        return None
    day = dates[0].value
    times = find_time_range(text)
    if times is None:
        return stamp(day), None
    start, end, _ = times
    if end is None:
        return stamp(day, start), None
    return stamp(day, start), stamp(day + timedelta(days=1 if end <= start else 0), end)


_APPOINTMENT = re.compile(
    r"\b(?:I|we)\s+(?:have|'ve\s+got|have\s+got|booked|scheduled|made|got)\s+(?:an?\s+|my\s+|the\s+)?"
    r"(?P<title>(?:[\w'-]+\s+){0,3}?(?:appointment|appt|check-?up|cleaning|consultation|physical|"
    r"exam|scan|x-ray|vaccination|surgery))\b"
    rf"|{I_AM}\s+seeing\s+(?P<who>(?:Dr\.?|Doctor)\s+(?-i:[A-Z][\w'-]+))", _I)


def appointments(s: Sentence, ctx: Context) -> list[Draft]:
    """``I have a dentist appointment next Friday at 3pm (with Dr. Lee)``."""
    m = _APPOINTMENT.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    when = _when(s.text[m.end():], s.today)
    if when is None:
        return []
    provider = _PROVIDER.search(s.text, m.end())
    who = m["who"] or (provider["who"] if provider else None)
    who = re.sub(r"^(?:Dr\.?|Doctor)\s+", "Dr. ", who) if who else None
    title = clean_phrase(m["title"]).lower() if m["title"] else "appointment"
    if title == "appointment" and who:
        title = f"appointment with {who}"
    return [(m.start(), make_fact(s, "appointment", {
        "title": title, "start": when[0], "end": when[1], "provider": who}))]


_EVENT = (
    re.compile(r"\b(?:I|we)(?:'m|’m|\s+am|'re|\s+are)\s+(?P<verb>having|hosting|attending|going\s+to|"
               rf"throwing|meeting)\s+(?P<title>.+?){_UNTIL_NEXT}", _I),
    re.compile(r"\b(?:I|we)\s+(?:have|'ve\s+got|have\s+got)\s+(?:an?\s+|my\s+|the\s+|our\s+)?"
               rf"(?P<title>(?!to\b)[\w' -]+?){_UNTIL_NEXT}", _I),
    re.compile(r"\bI(?:'ll|\s+will)\s+(?P<verb>be\s+at|attend|go\s+to)\s+(?P<title>.+?)"
               rf"{_UNTIL_NEXT}", _I),
)


def events(s: Sentence, ctx: Context) -> list[Draft]:
    """``I'm having dinner with Sam at Lupa on April 22 from 6:30 to 8:30pm`` (needs a date)."""
    if re.search(r"\bevery\b", s.text, _I):
        return []
    for pattern in _EVENT:
        m = pattern.search(s.text)
        if m is None or not affirmed(s.text, m.start(), m.end()):
            continue
        when = _when(s.text[m.end():], s.today)
        title = clean_phrase(m["title"])
        if when is None or not title:
            continue
        if m.groupdict().get("verb", "") == "meeting":
            title = f"meeting {title}"
        at = _LOCATION.search(s.text, m.end())
        return [(m.start(), make_fact(s, "event", {
            "title": title, "start": when[0], "end": when[1],
            "location": clean_phrase(at["at"]) if at else None}))]
    return []


_RECURRING = re.compile(
    r"\b(?:I|we)\s+(?:have|go\s+to|do|attend|take|teach|play|'ve\s+got|have\s+got|run|swim|"
    r"practice|practise)\s+(?P<title>[\w' -]+?)\s+(?:(?:every|each)\s+(?P<wd>" + WEEKDAY
    + r")\b|on\s+(?P<wd2>" + WEEKDAY + r")s\b)", _I)
_STARTS = re.compile(r"\b(?:starting|beginning|as\s+of|from)\s+(?:on\s+)?", _I)
_ENDS = re.compile(r"\b(?:until|through|till|ending)\s+(?:on\s+)?", _I)


def _date_after(keyword: re.Pattern[str], text: str, today: date) -> date | None:
    for m in keyword.finditer(text):
        dates = find_dates(text[m.end():], today)
        if dates and dates[0].start == 0:
            return dates[0].value
    return None


def recurring(s: Sentence, ctx: Context) -> list[Draft]:
    """``I have pilates class every Tuesday from 6 to 7pm`` (starts on the next Tuesday)."""
    m = _RECURRING.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    weekday = (m["wd"] or m["wd2"]).lower()
    rest = s.text[m.end():]
    times = find_time_range(rest)
    first = _date_after(_STARTS, rest, s.today)
    if first is None:
        first = s.today + timedelta(days=(WEEKDAYS.index(weekday) - s.today.weekday()) % 7)
    last = _date_after(_ENDS, rest, s.today)
    return [(m.start(), make_fact(s, "recurring_commitment", {
        "title": clean_phrase(m["title"]).lower(), "weekday": weekday,
        "start_time": clock(times[0]) if times else None,
        "end_time": clock(times[1]) if times and times[1] is not None else None,
        "starts_on": first.isoformat(), "ends_on": last.isoformat() if last else None}))]


_DEADLINE = (
    re.compile(r"\bmy\s+(?P<title>[\w' -]+?)\s+(?:is|are)\s+due\b", _I),
    re.compile(r"\bI\s+(?:have|need|must|'ve\s+got|have\s+got)\s+to\s+(?P<title>[\w' -]+?)\s+"
               r"(?:by|before)\b", _I),
    re.compile(r"\b(?:the|my)\s+deadline\s+(?:for|to)\s+(?P<title>[\w' -]+?)\s+is\b", _I),
    re.compile(r"\b(?:the|my)\s+(?P<title>[\w' -]+?)\s+deadline\s+is\b", _I),
)


def deadlines(s: Sentence, ctx: Context) -> list[Draft]:
    """``My tax return is due April 15``; ``I have to submit the grant report by May 1``."""
    for pattern in _DEADLINE:
        m = pattern.search(s.text)
        if m is None or not affirmed(s.text, m.start(), m.end()):
            continue
        dates = find_dates(s.text[m.end():], s.today)
        if dates:
            return [(m.start(), make_fact(s, "deadline", {
                "title": clean_phrase(m["title"]).lower(), "due": dates[0].value.isoformat(),
                "done": False}))]
    return []


_DONE = re.compile(r"\bI(?:'ve|\s+have)?\s+(?:just\s+|finally\s+|already\s+)?(?:submitted|filed|"
                   r"finished|completed|sent\s+(?:in|off)|done|handed\s+in|turned\s+in)\s+"
                   r"(?:my|the|our)\s+(?P<what>[^.,;!?]+)", _I)


def deadline_done(s: Sentence, ctx: Context) -> list[Draft]:
    """``I submitted my tax return``: a known deadline is ``done``."""
    m = _DONE.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    known = ctx.memory.latest(("deadline",), lambda k: bool(content_words(m["what"])
                                                           & k.text_words()))
    return [(m.start(), update(s, known, {"done": True}))] if known else []


_CONTRACT = re.compile(r"\bmy\s+(?P<title>(?:[\w-]+\s+){0,2}?(?P<kind>lease|contract|subscription|"
                       r"membership|rental\s+agreement|insurance(?:\s+policy)?|phone\s+plan))\b", _I)
_CONTRACT_ENDS = re.compile(r"\b(?:ends?|ending|expires?|runs\s+out|renews?|is\s+up|terminates?|"
                            r"runs\s+(?:until|through)|is\s+valid\s+until|lasts\s+until)\b", _I)
_NOTICE = re.compile(rf"\b(?P<n>{NUMBER})[\s-]+(?P<unit>day|week|month)s?['’]?\s+(?:of\s+)?"
                     r"(?:written\s+|advance\s+|prior\s+)?notice\b|\bnotice\s+period\s+(?:is|of)\s+"
                     rf"(?P<n2>{NUMBER})[\s-]+(?P<unit2>day|week|month)s?", _I)
_COUNTERPARTY = re.compile(rf"\b(?:with|from|through|via)\s+(?P<cp>{NAME})|\bmy\s+(?:landlord|"
                           rf"provider)\s+is\s+(?P<cp2>{NAME})", _I)
_KINDS = {"rental": "lease", "lease": "lease", "subscription": "subscription",
          "membership": "membership", "insurance": "insurance", "plan": "subscription"}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30}


def contracts(s: Sentence, ctx: Context) -> list[Draft]:
    """``My apartment lease with X ends on September 30 and I have to give 60 days' notice``."""
    m = _CONTRACT.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    attrs: dict[str, object] = {"title": clean_phrase(m["title"]).lower()}
    attrs["kind"] = next((_KINDS[w] for w in words(m["kind"]) if w in _KINDS), "contract")
    ends = _CONTRACT_ENDS.search(s.text, m.end())
    if ends and affirmed(s.text, m.start(), ends.end()):
        dates = find_dates(s.text[ends.end():], s.today)
        attrs["end_date"] = dates[0].value.isoformat() if dates else None
    notice = _NOTICE.search(s.text)
    if notice and (amount := count(notice["n"] or notice["n2"])) is not None:
        attrs["notice_days"] = amount * _UNIT_DAYS[(notice["unit"] or notice["unit2"]).lower()]
    if attrs.get("end_date") is None and "notice_days" not in attrs:
        return []
    party = _COUNTERPARTY.search(s.text)
    attrs["counterparty"] = (party["cp"] or party["cp2"]) if party else None
    return [(m.start(), make_fact(s, "contract", attrs))]


_NOTICE_GIVEN = re.compile(r"\bI(?:'ve|\s+have)?\s+(?:already\s+|just\s+|finally\s+)?(?:given|gave|"
                           r"sent|handed\s+in|served)\s+(?:my\s+|the\s+)?(?:landlord\s+)?notice\b", _I)


def notice_given(s: Sentence, ctx: Context) -> list[Draft]:
    """``I gave my landlord notice``: the lease (or the contract named) has ``notice_given``."""
    m = _NOTICE_GIVEN.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    query = content_words(s.text, ("given", "gave", "sent", "notice", "handed", "served", "ve"))
    if query & {"landlord", "apartment", "flat", "landlady"}:
        query = {"lease"}
    known = ctx.memory.matching(("contract",), query & {"lease"} or set())
    return [(m.start(), update(s, known, {"notice_given": True}))] if known else []


_RELATIONS = (r"best\s+friend|sister|brother|mother|mom|mum|father|dad|wife|husband|partner|"
              r"girlfriend|boyfriend|son|daughter|friend|colleague|co-?worker|boss|manager|aunt|"
              r"uncle|cousin|grandmother|grandma|grandfather|grandpa|neighbou?r|doctor|dentist|"
              r"therapist|accountant|lawyer|roommate")
_CONTACT = re.compile(rf"\bmy\s+(?P<rel>{_RELATIONS})(?:,\s*|\s+)(?P<name>(?:Dr\.?\s+)?{NAME})"
                      rf"|\bmy\s+(?P<rel2>{_RELATIONS})['’]s\s+name\s+is\s+(?P<name2>{NAME})", _I)
_PHONE = re.compile(r"\b(?:phone|number|cell|mobile)\s+(?:number\s+)?is\s+(?P<v>\+?\d[\d ().-]{5,}\d)",
                    _I)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.]+\b")
_BIRTHDAY = re.compile(r"\bbirthday\s+is\s+(?:on\s+)?", _I)


def contacts(s: Sentence, ctx: Context) -> list[Draft]:
    """``My sister Ana's number is 555 0142``: a contact (name, relationship, details)."""
    out: list[Draft] = []
    for m in _CONTACT.finditer(s.text):
        name = re.sub(r"['’]s$", "", m["name"] or m["name2"])
        phone, email = _PHONE.search(s.text), _EMAIL.search(s.text)
        birthday = None
        if (b := _BIRTHDAY.search(s.text)) and re.match(r"[^.,;]*\d{4}", s.text[b.end():]):
            found = find_dates(s.text[b.end():], s.today, future=False)
            birthday = found[0].value.isoformat() if found else None
        out.append((m.start(), make_fact(s, "contact", {
            "name": name, "relationship": " ".join((m["rel"] or m["rel2"]).lower().split()),
            "phone": phone["v"] if phone else None, "email": email[0] if email else None,
            "birthday": birthday})))
    return out


_PREFER = re.compile(r"\bI\s+(?:always\s+|really\s+|strongly\s+)?prefer\s+(?P<value>[\w-]+(?:\s+[\w-]+)?)"
                     r"\s+(?P<topic>seat|room|flight|appointment|table|meeting|hotel|airline|train|"
                     r"cabin)s?\b", _I)
_DIET = re.compile(rf"{I_AM}\s+(?:a\s+|an\s+|strictly\s+|now\s+)?(?P<diet>vegetarian|vegan|pescatarian|"
                   r"gluten-free|lactose[- ]intolerant|kosher|halal|teetotal|celiac|coeliac)\b", _I)


def preferences(s: Sentence, ctx: Context) -> list[Draft]:
    """``I prefer aisle seats``; ``I'm vegetarian``."""
    m = _PREFER.search(s.text)
    if m and affirmed(s.text, m.start(), m.end()):
        return [(m.start(), make_fact(s, "preference", {
            "topic": m["topic"].lower(), "value": m["value"].lower(), "sentiment": "likes"}))]
    m = _DIET.search(s.text)
    if m and affirmed(s.text, m.start(), m.end()):
        return [(m.start(), make_fact(s, "preference", {
            "topic": "diet", "value": m["diet"].lower(), "sentiment": "needs"}))]
    return []
