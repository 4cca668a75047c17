"""What the offline model's parsers share: sentences, memory of known entities, fact builders.

Pure: no I/O, no clock. :class:`Memory` holds the manifest's entities and the facts of the
window so far (most recent last), so a later sentence can update, correct or retract them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from uac.domains.catalog import derive_entity_id
from uac.domains.facts import to_utc

Fact = dict[str, Any]
Draft = tuple[int, Fact]
"""A parser's answer: the fact and its position in the sentence (for ordering)."""

NAME = r"(?-i:[A-Z][\w'&-]*(?:\s+(?:(?:of|and|the|de|&)\s+)?(?:[A-Z][\w'&-]*|\d{1,2}\b))*)"
"""A proper name: capitalised words (``Greenfield Property Management``, ``Bistro 9``)."""
I_AM = r"\bI(?:'m|’m|\s+am)"
NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|nobody|neither|nor|no\s+longer|any|anything|without)\b"
    r"|n['’]t\b", re.IGNORECASE)
_CLAUSE = re.compile(r"[,;:—–]|\bbut\b|\bthough\b|\bbecause\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")


def wordset(text: str) -> frozenset[str]:
    """The space-separated words of ``text`` as a set (for word lists in the source)."""
    return frozenset(text.split())


STOPWORDS = wordset(
    "a an the my our your his her their this that these those to of for on in at with and or "
    "it its is was be i me we new old")


def words(text: str | None) -> list[str]:
    """Lower-case alphanumeric words."""
    return _WORD.findall(text.lower()) if text else []


def content_words(text: str, ignore: Iterable[str] = ()) -> set[str]:
    """Words of ``text`` that carry meaning (no stopwords, nothing in ``ignore``)."""
    skip = STOPWORDS | set(ignore)
    return {w for w in words(text) if w not in skip and len(w) > 1 and not w.isdigit()}


def affirmed(text: str, start: int, end: int) -> bool:
    """No negation in the clause from its start to ``end`` (``I'm not ...``, ``any``)."""
    clause_start = max((m.end() for m in _CLAUSE.finditer(text, 0, start)), default=0)
    return NEGATION.search(text, clause_start, end) is None


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence of a user turn, with what parsers need to know about where it is."""

    text: str
    offset: int  # position in the turn's text
    rest: str  # the rest of the turn after this sentence
    turn_id: str
    time: str  # the turn's time, ISO 8601 UTC
    today: date  # the turn's UTC date


@dataclass(slots=True)
class Known:
    """An entity memory holds: from the manifest, or asserted earlier in this window."""

    type: str
    id: str
    attributes: dict[str, Any]
    facts: list[str] = field(default_factory=list)  # manifest fact ids behind the values
    turn: str | None = None  # the window turn that last wrote it; None: manifest only
    fact: Fact | None = None  # the window fact that last wrote it
    valid_time: str | None = None

    def text_words(self) -> set[str]:
        """Words of its text attributes (names, titles, destinations ...)."""
        return {w for v in self.attributes.values() if isinstance(v, str) for w in words(v)}


class Memory:
    """The manifest's entities plus this window's facts so far; later entries are more recent."""

    def __init__(self, manifest: list[dict[str, Any]]) -> None:
        self.known: list[Known] = []
        for entry in manifest:
            if not isinstance(entry, dict):
                continue
            kind, ident, attrs = entry.get("type"), entry.get("id"), entry.get("attributes")
            if isinstance(kind, str) and isinstance(ident, str) and isinstance(attrs, dict):
                facts = [f for f in entry.get("facts") or [] if isinstance(f, str)]
                self.known.append(Known(kind, ident, dict(attrs), facts))

    def entity_id(self, fact: Fact) -> str:
        """The id ``fact`` has: its explicit one, else derived from its type's natural key."""
        explicit = fact.get("id")
        if isinstance(explicit, str):
            return explicit
        return derive_entity_id(fact["type"], fact["attributes"], fact["turns"][0])

    def get(self, kind: str, ident: str) -> Known | None:
        return next((k for k in self.known if k.type == kind and k.id == ident), None)

    def remember(self, fact: Fact) -> None:
        """Fold one emitted fact into memory (a retraction forgets the entity)."""
        ident = self.entity_id(fact)
        known = self.get(fact["type"], ident)
        if known is not None:
            self.known.remove(known)
        if fact["op"] == "retract":
            return
        if known is None:
            known = Known(fact["type"], ident, {})
        known.attributes.update(fact["attributes"])
        known.turn, known.fact, known.valid_time = fact["turns"][0], fact, fact["valid_time"]
        self.known.append(known)

    def latest(self, types: Iterable[str], test: Callable[[Known], bool] = lambda k: True
               ) -> Known | None:
        """The most recent entity of one of ``types`` passing ``test``."""
        wanted = set(types)
        return next((k for k in reversed(self.known) if k.type in wanted and test(k)), None)

    def matching(self, types: Iterable[str], query: set[str]) -> Known | None:
        """The most recent entity of ``types`` whose text shares a word with ``query``; with
        an empty query, the most recent one of ``types``."""
        if not query:
            return self.latest(types)
        return self.latest(types, lambda k: bool(query & k.text_words()))


@dataclass(slots=True)
class Context:
    """The window's shared state: memory and the user's home country (ISO code)."""

    memory: Memory
    home: str = "US"


def make_fact(s: Sentence, kind: str, attributes: dict[str, Any], *, op: str = "assert",
              ident: str | None = None, valid: str | None = None,
              supersedes: Iterable[str] = ()) -> Fact:
    """A fact in the answer's shape; ``None`` attributes are left out."""
    fact: Fact = {
        "type": kind,
        "op": op,
        "attributes": {k: v for k, v in attributes.items() if v is not None},
        "valid_time": valid or s.time,
        "turns": [s.turn_id],
    }
    if ident is not None:
        fact["id"] = ident
    superseded = list(supersedes)
    if superseded:
        fact["supersedes"] = superseded
    return fact


def later(time: str, other: str | None) -> str:
    """The later of two ISO times (dates mean midnight UTC); ``time`` when ``other`` is None."""
    return time if other is None or to_utc(time) >= to_utc(other) else other


def update(s: Sentence, known: Known, changes: dict[str, Any]) -> Fact:
    """An assert on a known entity (by id) setting ``changes``, valid no earlier than its
    last window fact."""
    return make_fact(s, known.type, changes, ident=known.id, valid=later(s.time, known.valid_time))


def retract(s: Sentence, known: Known) -> Fact:
    """A retraction of a known entity, valid no earlier than its last window fact."""
    return make_fact(s, known.type, {}, op="retract", ident=known.id,
                     valid=later(s.time, known.valid_time))


def clean_phrase(text: str, drop: Iterable[str] = ("a", "an", "the", "my", "some", "our")
                 ) -> str:
    """A phrase without leading articles/possessives and surrounding spaces or punctuation."""
    tokens = text.strip(" ,;:.!?\"'").split()
    skip = set(drop)
    while tokens and tokens[0].lower() in skip:
        tokens.pop(0)
    return " ".join(tokens)
