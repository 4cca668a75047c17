"""Offline-model parsers for health (allergies, medications, conditions) and travel (trips,
passports, visas, where the user lives). Pure: each reads one sentence and the memory."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta

from uac.extraction.offline_dates import MONTH, find_dates, find_duration, find_money, shift
from uac.extraction.offline_memory import (
    I_AM,
    NAME,
    Context,
    Draft,
    Known,
    Sentence,
    affirmed,
    clean_phrase,
    content_words,
    make_fact,
    retract,
    update,
    words,
    wordset,
)
from uac.extraction.offline_places import country_code, demonym_code, iso_code

_I = re.IGNORECASE
_STOP = r"(?=\s+(?:and|but|which|so|since|because|when|that|who)\b|[.,;:!?—–(]|\s+-\s|$)"
_SEVERITY = {"severely": "severe", "severe": "severe", "very": "severe", "highly": "severe",
             "extremely": "severe", "deathly": "severe", "seriously": "severe",
             "serious": "severe", "mildly": "mild", "mild": "mild", "slightly": "mild",
             "slight": "mild", "moderately": "moderate", "moderate": "moderate"}
_SEV = "|".join(_SEVERITY)
_LIST_STOP = (r"(?=\s+(?:and\s+(?:it|they|I|that|this|my|so)|but|which|so|since|because|when|who)\b"
              r"|,\s*(?:it|they|I|which|that|so|but)\b|[.;:!?—–(]|\s+-\s|$)")
_ALLERGY = (
    re.compile(rf"{I_AM}\s+(?:also\s+)?(?:(?P<sev>{_SEV})\s+)?allergic\s+to\s+(?P<what>.+?)"
               rf"{_LIST_STOP}", _I),
    re.compile(rf"\bI\s+have\s+(?:an?\s+)?(?:(?P<sev>{_SEV})\s+)?allergy\s+to\s+(?P<what>.+?)"
               rf"{_LIST_STOP}",
               _I),
    re.compile(rf"\bI\s+have\s+(?:an?\s+)?(?:(?P<sev>{_SEV})\s+)?(?P<what>[\w-]+(?:\s+[\w-]+)?)"
               r"\s+allergy\b", _I),
)
_REACTION = re.compile(
    r"\b(?:(?:it|they|that|which)\s+(?:gives?|gave)\s+me|I\s+(?:get|got|break\s+out\s+in|"
    r"broke\s+out\s+in|develop|go\s+into)|(?:causes?|caused)|reaction\s+is)\s+"
    r"(?:an?\s+|really\s+bad\s+|bad\s+|severe\s+)*(?P<what>[\w -]+?)(?=\s+(?:and|but)\b|[.,;!?]|$)",
    _I)
_NOT_ALLERGIC = (
    re.compile(rf"{I_AM}\s+(?:not|no\s+longer|never)\s+allergic\s+to\s+(?P<what>.+?)"
               rf"(?:\s+any\s*more)?{_LIST_STOP}", _I),
    re.compile(r"\bI\s+(?:outgrew|have\s+outgrown|'ve\s+outgrown|no\s+longer\s+have)\s+"
               r"(?:my\s+)?(?P<what>[\w -]+?)\s+allergy\b", _I),
)
_NOTHING = frozenset({"anything", "nothing", "something", "it", "that", "this", "them", "any",
                      "everything", "stuff", "things"})


def _substances(text: str) -> list[str]:
    parts = re.split(r"\s*(?:,|\band\b|\bor\b|/)\s*", text)
    out = [clean_phrase(p, ("a", "an", "the", "some", "all")).lower() for p in parts]
    return [p for p in out if p and not (set(words(p)) & _NOTHING)]


def _reaction(s: Sentence, after: int) -> str | None:
    following = re.split(r"(?<=[.!?])\s+", s.rest.strip(), maxsplit=1)[0] if s.rest else ""
    for text in (s.text[after:], following):
        m = _REACTION.search(text)
        if m and affirmed(text, m.start(), m.end()):
            return clean_phrase(m["what"]).lower() or None
    return None


def allergies(s: Sentence, ctx: Context) -> list[Draft]:
    """``I'm (severely) allergic to X (and Y); it gives me hives``; ``I have a peanut allergy``."""
    for pattern in _ALLERGY:
        m = pattern.search(s.text)
        if m is None or not affirmed(s.text, m.start(), m.end()):
            continue
        reaction = _reaction(s, m.end())
        severity = _SEVERITY.get((m["sev"] or "").lower())
        if severity is None and reaction and "anaphyla" in reaction:
            severity = "severe"
        return [(m.start(), make_fact(s, "allergy", {
            "substance": what, "reaction": reaction, "severity": severity,
            "noted_on": s.today.isoformat()})) for what in _substances(m["what"])]
    return []


def allergy_reaction(s: Sentence, ctx: Context) -> list[Draft]:
    """``It gives me hives`` after an allergy stated in an earlier turn of the window."""
    m = _REACTION.match(s.text.strip())
    known = ctx.memory.latest(("allergy",), lambda k: k.turn not in (None, s.turn_id))
    if m is None or known is None or "reaction" in known.attributes:
        return []
    return [(0, update(s, known, {"reaction": clean_phrase(m["what"]).lower()}))]


def allergy_gone(s: Sentence, ctx: Context) -> list[Draft]:
    """``I'm not allergic to penicillin anymore``: retract a known allergy (only a known one)."""
    for pattern in _NOT_ALLERGIC:
        m = pattern.search(s.text)
        if m is None:
            continue
        out: list[Draft] = []
        for what in _substances(m["what"]):
            known = ctx.memory.latest(("allergy",), _substance_is(what))
            if known is not None:
                out.append((m.start(), retract(s, known)))
        return out
    return []


def _substance_is(what: str) -> Callable[[Known], bool]:
    query = content_words(what, ("allergy", "allergic"))
    return lambda k: bool(query) and query <= set(words(str(k.attributes.get("substance", ""))))


_DRUG_SUFFIX = re.compile(r"(?:cillin|mycin|cycline|floxacin|pril|sartan|olol|statin|azole|"
                          r"prazole|pine|tidine|done|profen|oxetine|pam|lam|mab|nib|formin|"
                          r"thyroxine|sone|olone|fen|caine|phen)$", _I)
KNOWN_DRUGS = wordset(
    "aspirin ibuprofen acetaminophen paracetamol tylenol advil motrin naproxen aleve "
    "metformin insulin lisinopril amlodipine atorvastatin simvastatin omeprazole "
    "levothyroxine albuterol prednisone sertraline fluoxetine citalopram escitalopram "
    "bupropion gabapentin tramadol codeine morphine oxycodone warfarin clopidogrel losartan "
    "hydrochlorothiazide furosemide cetirizine loratadine melatonin amoxicillin penicillin "
    "augmentin azithromycin doxycycline ciprofloxacin cephalexin keflex bactrim zoloft prozac "
    "xanax adderall ritalin lexapro wellbutrin synthroid ventolin epipen antibiotics")


def _drug(tag: str = "") -> str:
    """A drug name with an optional dose: groups ``name<tag>`` and ``dose<tag>``."""
    return (r"(?:an?\s+|some\s+)?(?:(?:course|prescription|dose)\s+(?:of|for)\s+)?"
            rf"(?P<name{tag}>[A-Za-z][\w-]+)(?:\s+(?P<dose{tag}>\d+(?:\.\d+)?\s*"
            r"(?:mg|mcg|µg|g|ml|iu|units?)\b))?")


_PRESCRIBED = (
    re.compile(r"(?P<who>\b(?:Dr\.?|Doctor)\s+(?-i:[A-Z][\w'-]+)|\bmy\s+(?:doctor|gp|dentist|"
               r"physician|psychiatrist|dermatologist))\s+(?:has\s+|just\s+)*prescribed\s+"
               rf"(?:me\s+)?{_drug()}", _I),
    re.compile(rf"\bI\s+(?:was|got|have\s+been|'ve\s+been|just\s+got)\s+(?:just\s+)?prescribed\s+"
               rf"{_drug()}(?:.*?\bby\s+(?P<who>(?:Dr\.?|Doctor)\s+(?-i:[A-Z][\w'-]+)))?", _I),
)
_TAKING = re.compile(
    rf"\bI(?:'ve|\s+have)?\s+(?:just\s+|now\s+)?(?:started|began|begun|start)\s+(?:taking|on)\s+"
    rf"{_drug('1')}|{I_AM}\s+(?:now\s+)?(?:taking|on)\s+{_drug('2')}|\bI\s+(?:take|use)\s+"
    rf"{_drug('3')}", _I)
_STOPPED = re.compile(
    r"\bI(?:'ve|\s+have)?\s+(?:just\s+)?(?:stopped|quit|discontinued|finished)\s+(?:taking\s+|"
    rf"my\s+)?(?P<name>[A-Za-z][\w-]+)|{I_AM}\s+(?:no\s+longer\s+(?:taking|on)|off)\s+"
    r"(?P<name2>[A-Za-z][\w-]+)", _I)


def _is_drug(name: str, dose: str | None) -> bool:
    lower = name.lower()
    if lower in {"a", "an", "the", "it", "my", "some", "any", "care", "time", "notes", "part",
                 "something", "anything", "nothing", "medication", "medicine", "meds"}:
        return False
    return bool(dose) or lower in KNOWN_DRUGS or _DRUG_SUFFIX.search(lower) is not None


def _doctor(who: str | None) -> str | None:
    if not who or who.lower().startswith("my "):
        return None
    return re.sub(r"^(?:Dr\.?|Doctor)\s+", "Dr. ", who.strip(), flags=_I)


def _dose(dose: str | None) -> str | None:
    return re.sub(r"(\d)\s*([a-zµ])", r"\1 \2", dose.lower()) if dose else None


def medications(s: Sentence, ctx: Context) -> list[Draft]:
    """``Dr. Okafor prescribed me amoxicillin 500 mg today``; ``I started taking X``."""
    for pattern in _PRESCRIBED:
        m = pattern.search(s.text)
        if m and affirmed(s.text, m.start(), m.end()) and _is_drug(m["name"], "x"):
            when = find_dates(s.text, s.today, future=False)
            day = when[0].value if when else s.today
            return [(m.start(), make_fact(s, "medication", {
                "name": m["name"].lower(), "dose": _dose(m["dose"]),
                "prescribed_on": day.isoformat(), "prescriber": _doctor(m["who"]),
                "status": "active"}, valid=day.isoformat() if when else None))]
    m = _TAKING.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    name = m["name1"] or m["name2"] or m["name3"]
    dose = m["dose1"] or m["dose2"] or m["dose3"]
    if not _is_drug(name, dose):
        return []
    when = find_dates(s.text, s.today, future=False)
    return [(m.start(), make_fact(s, "medication", {
        "name": name.lower(), "dose": _dose(dose), "status": "active"},
        valid=when[0].value.isoformat() if when else None))]


def medication_stopped(s: Sentence, ctx: Context) -> list[Draft]:
    """``I stopped taking ibuprofen``: the medication's status becomes ``stopped``."""
    m = _STOPPED.search(s.text)
    if m is None:
        return []
    name = (m["name"] or m["name2"]).lower()
    known = ctx.memory.latest(("medication",), lambda k: str(k.attributes.get("name", "")).lower()
                              == name)
    if known is not None:
        return [(m.start(), update(s, known, {"status": "stopped"}))]
    if not _is_drug(name, None):
        return []
    return [(m.start(), make_fact(s, "medication", {"name": name, "status": "stopped"}))]


_DIAGNOSED = re.compile(r"\bI\s+(?:was|got|have\s+been|'ve\s+been)\s+(?:just\s+|recently\s+)?"
                        rf"diagnosed\s+with\s+(?P<what>.+?)(?=\s+(?:in|on|last|yesterday|today|"
                        rf"this|back|two|a)\b|{_STOP})", _I)


def conditions(s: Sentence, ctx: Context) -> list[Draft]:
    """``I was diagnosed with asthma last year``."""
    m = _DIAGNOSED.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    when = find_dates(s.text[m.end():], s.today, future=False)
    return [(m.start(), make_fact(s, "condition", {
        "name": clean_phrase(m["what"]).lower(), "status": "active",
        "diagnosed_on": when[0].value.isoformat() if when else None}))]


_TRIP = (
    re.compile(r"\b(?:I|we)(?:'ve|\s+have)?\s+(?:just\s+|finally\s+)?booked\s+(?:an?\s+|my\s+|our\s+"
               r"|the\s+)?(?:(?P<kind>[\w-]+)\s+)?(?P<noun>trip|flights?|vacation|holiday|getaway|"
               rf"tickets?|honeymoon)\s+(?:to|for)\s+(?P<dest>{NAME})", _I),
    re.compile(rf"(?:{I_AM}|\bwe(?:'re|\s+are))\s+(?:going|flying|traveling|travelling|heading|off)"
               rf"\s+(?:back\s+)?to\s+(?P<dest>{NAME})", _I),
    re.compile(r"\b(?:I|we)\s+have\s+(?:an?\s+|our\s+)?(?:(?P<kind>[\w-]+)\s+)?(?P<noun>trip|flight|"
               rf"vacation|holiday)\s+to\s+(?P<dest>{NAME})", _I),
)
_SAME_MONTH = re.compile(rf"\b(?P<mon>{MONTH})\.?\s+(?P<a>\d{{1,2}})(?:st|nd|rd|th)?\s*(?:-|–|to|"
                         r"until|through|thru)\s*(?P<b>\d{1,2})(?:st|nd|rd|th)?\b(?!\s*(?:am|pm|:))",
                         _I)
_TRIPPY = re.compile(r"\b(?:trip|fly|flying|flight|vacation|holiday|travel\w*)\b", _I)
_PURPOSES = {"business": "business", "work": "business", "conference": "business",
             "vacation": "leisure", "holiday": "leisure", "honeymoon": "leisure",
             "leisure": "leisure", "getaway": "leisure", "family": "family"}


def _trip_dates(text: str, today: date) -> tuple[date | None, date | None]:
    m = _SAME_MONTH.search(text)
    if m and (first := find_dates(m[0], today)):
        try:
            last = first[0].value.replace(day=int(m["b"]))
        except ValueError:
            return first[0].value, None
        return first[0].value, last if last >= first[0].value else None
    dates = find_dates(text, today)
    start = dates[0].value if dates else None
    end = dates[1].value if len(dates) > 1 else None
    span = re.search(r"\bfor\s+(?:a\s+|about\s+)?(?:\w+\s+)?(?:days?|weeks?|months?)\b", text, _I)
    if start and end is None and span and (length := find_duration(span[0])):
        after = shift(start, length[0], length[1])
        end = after - timedelta(days=1) if after else None
    return start, end


def trips(s: Sentence, ctx: Context) -> list[Draft]:
    """``I booked a trip to Tokyo from October 5 to October 19 for $2,100``."""
    for pattern in _TRIP:
        m = pattern.search(s.text)
        if m is None or not affirmed(s.text, m.start(), m.end()):
            continue
        start, end = _trip_dates(s.text[m.end():], s.today)
        if start is None:
            return []
        dest = m["dest"].strip()
        code = country_code(dest)
        if code is None and not m.groupdict().get("noun") and not _TRIPPY.search(s.text):
            return []
        purpose = next((_PURPOSES[w] for w in words(s.text) if w in _PURPOSES), None)
        money = find_money(s.text)
        return [(m.start(), make_fact(s, "trip", {
            "destination": dest, "country": code, "start_date": start.isoformat(),
            "end_date": end.isoformat() if end else None,
            "international": code != ctx.home if code else None, "purpose": purpose,
            "cost": money[0].amount if money else None,
            "currency": money[0].currency if money else None}))]
    return []


_HOME = re.compile(rf"\bI\s+(?:live|am\s+based|'m\s+based|reside|moved)\s+(?:in|to)\s+(?P<place>{NAME})",
                   _I)


def home_country(text: str) -> str | None:
    """``I live in Germany``/``I moved to Berlin`` -> ``DE``; None if not said."""
    found = None
    for m in _HOME.finditer(text):
        if affirmed(text, m.start(), m.end()):
            found = country_code(m["place"]) or found
    return found


_PASSPORT = re.compile(r"\b(?:my|I\s+(?:got|have|received)\s+a\s+new)\s+(?:new\s+|current\s+|renewed\s+)?"
                       r"(?:(?P<adj>[A-Za-z.]+(?:\s+[A-Za-z]+)?)\s+)??passport\b", _I)
_EXPIRES = re.compile(r"\b(?:expires?|expiring|expired|runs\s+out|valid\s+(?:until|through|till)|"
                      r"good\s+until|expiry\s+date|expiration\s+date)\b", _I)
_PASSPORT_NO = re.compile(r"passport\s+(?:number|no\.?|#)\s*(?:is\s+)?(?P<num>(?-i:[A-Z0-9]{6,12}))\b",
                          _I)


def _passport(ctx: Context, code: str | None) -> tuple[str, Known | None]:
    known = ctx.memory.latest(("passport",), lambda k: code is None or _country(k) == code)
    if known is not None:
        return str(known.attributes.get("country") or code or ctx.home), known
    return code or ctx.home, None


def passports(s: Sentence, ctx: Context) -> list[Draft]:
    """``My passport (number X1234567) expires on December 20, 2025``; ``my German passport``."""
    m = _PASSPORT.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    code = demonym_code(m["adj"]) if m["adj"] else None
    attrs: dict[str, object] = {}
    expires = _EXPIRES.search(s.text, m.start())
    if expires and affirmed(s.text, m.start(), expires.end()):
        when = find_dates(s.text[expires.end():], s.today, future=expires[0].lower() != "expired")
        if when:
            attrs["expiry_date"] = when[0].value.isoformat()
    number = _PASSPORT_NO.search(s.text)
    if number:
        attrs["number"] = number["num"]
    issued = re.search(r"\bissued\b", s.text, _I)
    if issued and (when := find_dates(s.text[issued.end():], s.today, future=False)):
        attrs["issued_on"] = when[0].value.isoformat()
    if not attrs:
        return []
    country, known = _passport(ctx, code)
    return [(m.start(), make_fact(s, "passport", {"country": country, **attrs},
                                  ident=known.id if known else None))]


_VISA = re.compile(
    r"\b(?:I\s+(?:got|have|received|was\s+granted|was\s+issued)|my)\s+(?:an?\s+|new\s+)*"
    r"(?:(?P<entries>single|multiple|double)[- ]entry\s+)?(?:(?P<adj>[A-Za-z]+)\s+)?"
    rf"(?:(?P<entries2>single|multiple|double)[- ]entry\s+)?visa\b(?:\s+(?:for|to)\s+(?P<dest>{NAME}))?",
    _I)
_VISA_USED = re.compile(r"\bI\s+(?:used|entered\s+\w+\s+on)\s+my\s+(?:(?P<adj>[A-Za-z]+)\s+)?visa\b", _I)


def visas(s: Sentence, ctx: Context) -> list[Draft]:
    """``I got a single-entry visa for India valid from March 1 to March 31``."""
    m = _VISA.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()) or _VISA_USED.search(s.text):
        return []
    code = country_code(m["dest"]) if m["dest"] else None
    code = code or (demonym_code(m["adj"]) if m["adj"] else None)
    if code is None:
        return []
    rest = s.text[m.end():]
    dates = find_dates(rest, s.today)
    until = re.search(r"\b(?:until|through|till|expires?|to)\b", rest, _I)
    valid_from = dates[0].value if len(dates) > 1 or (dates and not until) else None
    valid_until = dates[-1].value if dates and until else None
    entries = (m["entries"] or m["entries2"] or "").lower() or None
    return [(m.start(), make_fact(s, "visa", {
        "country": code, "entries": entries,
        "valid_from": valid_from.isoformat() if valid_from else None,
        "valid_until": valid_until.isoformat() if valid_until else None}))]


def _country(known: Known) -> str | None:
    return iso_code(str(known.attributes.get("country", "")))


def visa_used(s: Sentence, ctx: Context) -> list[Draft]:
    """``I used my India visa on March 5``: the visa's ``used_on``."""
    m = _VISA_USED.search(s.text)
    if m is None or not affirmed(s.text, m.start(), m.end()):
        return []
    code = demonym_code(m["adj"]) if m["adj"] else None
    known = ctx.memory.latest(("visa",), lambda k: code is None or _country(k) == code)
    dates = find_dates(s.text[m.end():], s.today, future=False)
    day = (dates[0].value if dates else s.today).isoformat()
    if known is not None:
        return [(m.start(), update(s, known, {"used_on": day}))]
    if code is None:
        return []
    return [(m.start(), make_fact(s, "visa", {"country": code, "used_on": day}))]

