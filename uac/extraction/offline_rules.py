"""The offline model: rule-based, deterministic extraction of typed facts from conversation turns.

:func:`extract` answers the extraction prompt as an LLM would (``{"facts": [...]}``), from
plain first-person statements only; :data:`OFFLINE_FORMS` lists every form it understands.
Pure: no I/O, no clock, no randomness. Same input, same output, facts in turn then text order.

It reads only ``user`` turns, one sentence at a time, and stays conservative. Skipped:
questions (``Am I allergic to penicillin?``), the rest of a sentence from a hypothetical or
hedge (``if``, ``what if``, ``suppose``, ``maybe``, ``might``, ``thinking about`` ...), negated
clauses (``I'm not allergic to anything``, ``I don't take any medication``), statements about
other people (only ``I``/``my`` statements count: ``my sister is allergic to penicillin`` is
not the user's allergy) and whole turns that address the extractor (``ignore previous
instructions ...``). Dates resolve against the turn's time (conventions in
:mod:`uac.extraction.offline_dates`; ``next Friday`` said on Tuesday 2025-03-04 is
2025-03-14, ``on Friday`` 2025-03-07); clock times are UTC. A trip is international when its
country differs from the user's home: ``I live in <country>`` in the window, else the country
of the passport in memory, else the US. A reaction may follow an allergy in a later turn of
the window (``It gives me hives.``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from datetime import date
from typing import Any

from uac.domains.catalog import get_type
from uac.domains.facts import iso, to_utc
from uac.extraction import offline_finance as fin
from uac.extraction import offline_health_travel as ht
from uac.extraction import offline_schedule as sch
from uac.extraction.offline_dates import Spec, find_fragments
from uac.extraction.offline_memory import (
    Context,
    Draft,
    Fact,
    Known,
    Memory,
    Sentence,
    content_words,
    later,
    make_fact,
    retract,
    words,
    wordset,
)
from uac.extraction.offline_places import country_code, iso_code

OFFLINE_FORMS: tuple[tuple[str, str], ...] = (
    ("health", "I'm allergic to penicillin; it gives me hives."),
    ("health", "I have a severe peanut allergy."),
    ("health", "I'm not allergic to penicillin anymore."),
    ("health", "Dr. Okafor prescribed me amoxicillin 500 mg today."),
    ("health", "I started taking ibuprofen 200 mg yesterday."),
    ("health", "I stopped taking ibuprofen."),
    ("health", "I was diagnosed with type 2 diabetes on March 3."),
    ("health", "I have a dentist appointment next Friday at 3pm."),
    ("travel", "I booked a trip to Tokyo from October 5 to October 19."),
    ("travel", "I'm flying to Paris on May 3 and coming back May 10."),
    ("travel", "I live in France. I booked a trip to Paris from May 3 to May 10."),
    ("travel", "My passport expires on December 20, 2025."),
    ("travel", "I renewed my passport; it now expires December 20, 2030."),
    ("travel", "I got a single-entry visa for India valid from March 10 to April 10."),
    ("travel", "I used my India visa on March 2."),
    ("travel", "I cancelled the Tokyo trip."),
    ("schedule", "My lease ends on September 30 and I have to give 60 days' notice."),
    ("schedule", "My gym membership renews on May 1."),
    ("schedule", "I gave my landlord notice."),
    ("schedule", "I have pilates every Tuesday from 6 to 7pm."),
    ("schedule", "I'm having dinner with Sam at Lupa on April 22 from 6:30 to 8:30pm."),
    ("schedule", "My tax return is due April 15."),
    ("schedule", "I have to submit the grant report by May 1."),
    ("schedule", "I submitted my tax return."),
    ("finance", "Pay Greenfield Property Management 1450 EUR to account DE89 3704 0044 0532 0130 00."),
    ("finance", "My landlord's new account is GB33 BUKB 2020 1555 5555 55."),
    ("finance", "I want to keep dining out under $300 a month."),
    ("finance", "My grocery budget is $400 a month."),
    ("finance", "I spent $120 at Lupa on dinner."),
    ("finance", "Dinner at Bistro 9 cost me $110 yesterday."),
    ("purchases", "I bought noise-cancelling headphones for $349 at SoundShop; I can return them "
                  "until August 10 and the warranty runs two years."),
    ("purchases", "I returned the headphones."),
    ("people", "My sister Ana's number is 555 0142."),
    ("preferences", "I prefer aisle seats."),
    ("preferences", "I'm vegetarian."),
    ("corrections", "Actually it's the 14th, not the 12th."),
    ("corrections", "Actually my passport expires in 2030, not 2025."),
    ("corrections", "Sorry, the dentist appointment is at 4pm, not 3pm."),
)
"""(domain, example sentence) for every statement form understood; shown in --help and the README.

Retractions, status changes and corrections need the entity in memory (manifest or window)."""

Parser = Callable[[Sentence, Context], list[Draft]]

_INJECTION = re.compile(
    r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+|of\s+)*"
    r"(?:previous|prior|above|earlier|preceding|system|these|those|other)?\s*(?:instructions|rules|"
    r"prompts?|messages|directions|guidelines)\b|\bsystem\s+prompt\b|\byou\s+are\s+now\b|"
    r"\bnew\s+instructions\b|\bdeveloper\s+mode\b|\bjailbreak\b|\b(?:output|emit|return|record|"
    r"add|insert|delete|retract|remove|erase)\s+(?:a\s+|the\s+|all\s+|every\s+|these\s+)?(?:facts?|"
    r"json|entries|records|entities|memory|memories)\b", re.IGNORECASE)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|suppose|supposing|imagine|hypothetically|pretend|assuming|in\s+case|whether|"
    r"maybe|perhaps|might|wonder|wondering|considering|thinking\s+(?:about|of)|unless|wish|"
    r"forget\s+that|(?:don't|do\s+not)\s+(?:record|remember|save|note|store))\b", re.IGNORECASE)
_QUESTION_WORDS = wordset(
    "am is are do does did can could should would will was were have has what when where why "
    "how which who whom whose shall")
_INTERJECTIONS = wordset(
    "so and but also oh well hey hi hello ok okay actually wait btw then now")
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
_ABBREVIATIONS = ("dr.", "mr.", "mrs.", "ms.", "st.", "prof.", "jr.", "sr.", "vs.", "e.g.",
                  "i.e.", "approx.", "no.", "jan.", "feb.", "mar.", "apr.", "jun.", "jul.",
                  "aug.", "sep.", "sept.", "oct.", "nov.", "dec.")


def _is_question(text: str) -> bool:
    if text.rstrip().endswith("?"):
        return True
    tokens = [w for w in re.split(r"[\s,]+", text.strip().lower()) if w]
    while tokens and tokens[0] in _INTERJECTIONS:
        tokens.pop(0)
    return bool(tokens) and tokens[0] in _QUESTION_WORDS


def _spans(text: str) -> Iterator[tuple[int, int]]:
    """Sentence spans: split after ``.!?`` before a capital (not after ``Dr.``), and at newlines."""
    start = 0
    for m in _BOUNDARY.finditer(text):
        if text[start:m.start()].lower().endswith(_ABBREVIATIONS):
            continue
        yield start, m.start()
        start = m.end()
    yield start, len(text)


def _sentences(turn: dict[str, Any]) -> list[Sentence]:
    """A user turn's usable sentences: no questions, cut before hypotheticals; none at all for a
    turn addressing the extractor."""
    text, when = turn.get("text"), turn.get("time")
    if (turn.get("role") != "user" or not isinstance(text, str) or not isinstance(when, str)
            or not isinstance(turn.get("id"), str) or _INJECTION.search(text)):
        return []
    text = text.replace("’", "'").replace("‘", "'")  # same length: offsets hold
    try:
        moment = to_utc(when)
    except ValueError:
        return []
    out = []
    for start, end in _spans(text):
        sentence = text[start:end]
        if not sentence.strip() or _is_question(sentence):
            continue
        cut = _HYPOTHETICAL.search(sentence)
        sentence = sentence[:cut.start()] if cut else sentence
        if sentence.strip():
            out.append(Sentence(sentence, start, text[end:], turn["id"], iso(moment),
                                moment.date()))
    return out


_TYPE_NOUNS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("trip", "flight", "flights", "vacation", "holiday", "travel", "getaway"),
                    ("trip",)),
    **dict.fromkeys(("appointment", "appt", "checkup", "dentist", "doctor", "exam"),
                    ("appointment",)),
    **dict.fromkeys(("dinner", "lunch", "party", "meeting", "event", "concert", "reservation",
                     "date", "breakfast", "brunch"), ("event",)),
    **dict.fromkeys(("class", "classes", "lesson", "lessons", "session", "sessions",
                     "practice"), ("recurring_commitment", "event")),
    **dict.fromkeys(("subscription", "membership", "lease", "contract", "plan", "notice"),
                    ("contract",)),
    "passport": ("passport",), "visa": ("visa",), "warranty": ("purchase",),
    "return": ("purchase",), "deadline": ("deadline",), "due": ("deadline",),
    "prescription": ("medication",),
}
_CANCELLABLE = ("trip", "appointment", "event", "recurring_commitment", "contract")
_CANCEL = re.compile(r"\b(?:I|we)(?:'ve|\s+have)?\s+(?:just\s+|had\s+to\s+)?(?:cancel(?:l)?ed|"
                     r"called\s+off|scrapped|quit|dropped|stopped\s+going\s+to)\s+(?:my|the|our)\s+"
                     r"(?P<what>[^.,;!?]+)", re.IGNORECASE)


def _query(text: str) -> set[str]:
    """Content words of ``text`` that are not type nouns, plus the ISO codes of places in it."""
    query = content_words(text, _TYPE_NOUNS)
    return query | {code.lower() for w in query if (code := country_code(w))}


def cancellations(s: Sentence, ctx: Context) -> list[Draft]:
    """``I cancelled the Tokyo trip``: retract the most recent matching trip, appointment,
    event, weekly commitment or contract."""
    m = _CANCEL.search(s.text)
    if m is None:
        return []
    types = {t for w in words(m["what"]) for t in _TYPE_NOUNS.get(w, ())} & set(_CANCELLABLE)
    known = ctx.memory.matching(sorted(types) or _CANCELLABLE, _query(m["what"]))
    return [(m.start(), retract(s, known))] if known else []


_NOT = re.compile(r"(?:,\s*|\s+)(?:and\s+)?not\s+(?:on\s+|in\s+|at\s+|until\s+|by\s+|from\s+)?"
                  r"(?:the\s+)?", re.IGNORECASE)
_MARKER = re.compile(r"\b(?:actually|sorry|correction|meant|mean|mistake|wrong|misread|typo|mixed"
                     r"|oops|wait|instead|is|it's|are|was|expires?|ends?|starts?|moved|changed)\b",
                     re.IGNORECASE)
_ATTRIBUTE_HINTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("expire", "expires", "expired", "expiry", "valid"),
                    ("expiry_date", "valid_until")),
    **dict.fromkeys(("end", "ends", "renews", "back", "until"), ("end_date", "end", "ends_on")),
    **dict.fromkeys(("start", "starts", "leave", "depart", "from"),
                    ("start_date", "start", "starts_on", "valid_from")),
    "return": ("return_by",), "warranty": ("warranty_until",), "due": ("due", "due_date"),
}
"""Words that point at the attribute a correction moves."""


def _parts(value: Any) -> tuple[date, int | None] | None:
    """A stored date or datetime attribute as (date, minute of the day or None)."""
    try:
        if isinstance(value, str) and len(value) > 10:
            moment = to_utc(value)
            return moment.date(), moment.hour * 60 + moment.minute
        return (date.fromisoformat(value), None) if isinstance(value, str) else None
    except ValueError:
        return None


def _matches(parts: tuple[date, int | None], spec: Spec) -> bool:
    day, minute = parts
    have = {"year": day.year, "month": day.month, "day": day.day, "minute": minute}
    return all(have[k] == v for k, v in spec.items())


def _moved(parts: tuple[date, int | None], spec: Spec) -> str | None:
    """The value with ``spec``'s parts replaced, in its original form (date or datetime)."""
    day, minute = parts
    try:
        day = day.replace(**{k: v for k, v in spec.items() if k != "minute"})
    except ValueError:
        return None
    if minute is None:
        return None if "minute" in spec else day.isoformat()
    minute = spec.get("minute", minute)
    return f"{day.isoformat()}T{minute // 60:02d}:{minute % 60:02d}:00Z"


def _dated(known: Known) -> list[str]:
    etype = get_type(known.type)
    fields = etype.fields if etype else ()
    return [f.name for f in fields if f.kind in ("date", "datetime") and f.name != "noted_on"
            and f.name in known.attributes]


def _target(memory: Memory, old: Spec, text: str) -> tuple[Known, str] | None:
    """The most recent entity with a date attribute matching ``old`` (preferring one the
    sentence names), and which attribute."""
    named = {t for w in words(text) for t in _TYPE_NOUNS.get(w, ())}
    query = _query(text)
    pointed = [a for w in words(text) for a in _ATTRIBUTE_HINTS.get(w, ())]
    hits: list[tuple[Known, str]] = []
    for known in reversed(memory.known):
        attrs = [a for a in _dated(known) if (p := _parts(known.attributes[a])) and _matches(p, old)]
        if attrs:
            hits.append((known, next((a for a in pointed if a in attrs), attrs[0])))
    hits.sort(key=lambda h: (h[0].type not in named, h[1] not in pointed,
                             not query & h[0].text_words()))
    return hits[0] if hits else None


def correction_shape(text: str) -> tuple[int, Spec, Spec] | None:
    """``<new>, not <old>`` with a date or time on both sides: (position, new, old)."""
    for m in _NOT.finditer(text):
        after, before = find_fragments(text[m.end():]), find_fragments(text[:m.start()])
        if after and after[0][0] == 0 and before and _MARKER.search(text[:m.start()]):
            return m.start(), before[-1][2], after[0][2]
    return None


def _changes(known: Known, attr: str, new: Spec) -> dict[str, Any] | None:
    """The moved attribute (and an event's end, moved with its start)."""
    parts = _parts(known.attributes[attr])
    value = _moved(parts, new) if parts else None
    if value is None:
        return None
    changes = {attr: value}
    end = known.attributes.get("end")
    if attr == "start" and isinstance(end, str) and _parts(end):
        changes["end"] = iso(to_utc(end) + (to_utc(value) - to_utc(str(known.attributes[attr]))))
    return changes


def corrections(s: Sentence, ctx: Context) -> list[Draft]:
    """``Actually it's the 14th, not the 12th``: move the matching date of the most recent
    entity; a manifest entity's facts are superseded by a full corrected copy."""
    shape = correction_shape(s.text)
    hit = _target(ctx.memory, shape[2], s.text) if shape else None
    changes = _changes(hit[0], hit[1], shape[1]) if hit and shape else None
    if shape is None or hit is None or changes is None:
        return []
    known = hit[0]
    if known.turn == s.turn_id and known.fact is not None:  # said in this turn: fix it there
        known.fact["attributes"].update(changes)
        known.attributes.update(changes)
        known.id = ctx.memory.entity_id(known.fact)
        return []
    return [(shape[0], make_fact(s, known.type, {**known.attributes, **changes},
                                 ident=known.id, valid=later(s.time, known.valid_time),
                                 supersedes=known.facts))]


FIRST: tuple[Parser, ...] = (
    corrections, cancellations, ht.allergy_gone, ht.medication_stopped, fin.purchase_returned,
    sch.deadline_done, sch.notice_given, ht.visa_used, ht.allergy_reaction)
"""Updates of known entities: when one answers, the sentence is not read as a new statement."""
DOMAIN: tuple[Parser, ...] = (
    ht.allergies, ht.medications, ht.conditions, ht.trips, ht.passports, ht.visas,
    sch.contracts, fin.payments, fin.budgets, fin.purchases, fin.transactions,
    sch.appointments, sch.recurring, sch.deadlines)
FALLBACK: tuple[Parser, ...] = (sch.events,)
"""Read only when no other parser found a statement (``I have X on <date>`` is an event)."""
EXTRA: tuple[Parser, ...] = (sch.contacts, sch.preferences)


def _read(s: Sentence, ctx: Context) -> list[Fact]:
    """One sentence's facts, in text order: updates of known entities first; new statements
    only if there were none (events only if nothing else); contacts and preferences always."""
    drafts: list[tuple[int, int, Fact]] = []
    for group in (FIRST, DOMAIN, FALLBACK):
        for order, parser in enumerate(group):
            drafts.extend((pos, order, fact) for pos, fact in parser(s, ctx))
        if drafts or (group is FIRST and correction_shape(s.text)):
            break
    for order, parser in enumerate(EXTRA):
        drafts.extend((pos, 100 + order, fact) for pos, fact in parser(s, ctx))
    return [fact for _, _, fact in sorted(drafts, key=lambda d: (d[0], d[1]))]


def _home(sentences: list[Sentence], memory: Memory) -> str:
    said = [code for s in sentences if (code := ht.home_country(s.text))]
    if said:
        return said[-1]
    passport = memory.latest(("passport",))
    code = iso_code(str(passport.attributes.get("country", ""))) if passport else None
    return code or "US"


def extract(turns: list[dict[str, Any]], manifest: list[dict[str, Any]]) -> dict[str, Any]:
    """The offline model's answer: {"facts": [...]}. Pure and deterministic."""
    memory = Memory(copy.deepcopy(manifest))
    read = [_sentences(t) for t in turns if isinstance(t, dict)]
    ctx = Context(memory, _home([s for ss in read for s in ss], memory))
    facts: list[Fact] = []
    for sentences in read:
        for sentence in sentences:
            for fact in _read(sentence, ctx):
                memory.remember(fact)
                facts.append(fact)
    return {"facts": facts}

