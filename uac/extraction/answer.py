"""A model's answer to facts: parse (with one local repair), check the shape, validate. No I/O.

Nothing from a model is trusted. The answer must be ``{"facts": [...]}``; each
fact is validated on its own against the catalog, and one that does not fit is
refused with its reason while the others go on. The user a fact is about is
never the model's to choose: it is the user whose turns were sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from uac.domains.catalog import GENERIC_TYPE, derive_entity_id, get_type, validate_attributes
from uac.domains.facts import Fact, Op, make_fact, to_utc
from uac.errors import ValidationError
from uac.extraction.turns import Turn

FACT_KEYS = frozenset({"type", "op", "id", "attributes", "valid_time", "turns", "supersedes",
                       "confidence"})
MAX_FACTS = 200
MAX_ATTRIBUTE_BYTES = 8192
DEFAULT_CONFIDENCE = 0.8
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


class AnswerError(ValidationError):
    """The answer as a whole is unusable (not JSON, or not ``{"facts": [...]}``)."""


@dataclass(frozen=True, slots=True)
class FactReject:
    """One fact of an answer that was refused: its position, why, and the fact as sent."""

    index: int
    reason: str
    raw: Any


@dataclass(frozen=True, slots=True)
class ParsedAnswer:
    """The facts an answer holds (still unvalidated) and whether it needed a repair."""

    facts: list[Any]
    repaired: bool


def parse_answer(text: str) -> ParsedAnswer:
    """Decode an answer; one local repair (code fences, prose around the object, trailing commas)."""
    repaired = False
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        fixed = _repair(text)
        try:
            data = orjson.loads(fixed) if fixed is not None else None
        except orjson.JSONDecodeError:
            data = None
        if data is None:
            raise AnswerError(f"the answer is not valid JSON ({exc})") from None
        repaired = True
    if isinstance(data, list):  # a bare list of facts
        data = {"facts": data}
    if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
        raise AnswerError('the answer is JSON but not an object {"facts": [...]}')
    if len(data["facts"]) > MAX_FACTS:
        raise AnswerError(f"the answer has {len(data['facts'])} facts; at most {MAX_FACTS} allowed")
    return ParsedAnswer(data["facts"], repaired)


def _repair(text: str) -> str | None:
    body = _FENCE.sub("", text.strip())
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        return None
    return _TRAILING_COMMA.sub(r"\1", body[start:end + 1])


@dataclass(frozen=True, slots=True)
class Window:
    """What a call was given: the user, the turns, and the fact ids its manifest showed."""

    user_id: str
    turns: Sequence[Turn]
    manifest_fact_ids: frozenset[str]

    def turn(self, turn_id: str) -> Turn | None:
        for turn in self.turns:
            if turn.turn_id == turn_id:
                return turn
        return None


def validate_facts(raw_facts: Sequence[Any], window: Window, source: str
                   ) -> tuple[list[Fact], list[FactReject]]:
    """Each raw fact as a :class:`Fact` of ``window.user_id``, or a :class:`FactReject`."""
    facts: list[Fact] = []
    rejects: list[FactReject] = []
    for index, raw in enumerate(raw_facts):
        try:
            facts.append(validate_fact(raw, window, source, f"fact {index}", index))
        except ValidationError as exc:
            rejects.append(FactReject(index, exc.reason, raw))
    return facts, rejects


def validate_fact(raw: Any, window: Window, source: str, where: str, index: int = 0) -> Fact:
    """One raw fact, checked field by field; raises :class:`ValidationError` with the reason.

    A new entity of a type without a natural key (a transaction) gets an id from its turn and
    its position in the answer, so two of them from one turn stay two entities.
    """
    if not isinstance(raw, Mapping):
        raise ValidationError("a fact must be a JSON object", where=where)
    unknown = sorted(set(raw) - FACT_KEYS)
    if unknown:
        raise ValidationError(f"unknown key(s) {unknown}; a fact has {sorted(FACT_KEYS)}", where=where)
    cited = _cited_turns(raw.get("turns"), window, where)
    etype, attrs = _typed_attributes(raw, where)
    try:
        op = Op(raw.get("op", "assert"))
    except ValueError:
        raise ValidationError(f"'op' must be assert or retract, got {raw.get('op')!r}",
                              where=where) from None
    observed = max(t.timestamp for t in cited)
    valid = _valid_time(raw.get("valid_time"), observed, where)
    entity_id = raw.get("id")
    if entity_id is not None and (not isinstance(entity_id, str) or not entity_id.strip()
                                  or len(entity_id) > 200):
        raise ValidationError("'id' must be a non-empty string of at most 200 characters",
                              where=where)
    if op is Op.RETRACT and entity_id is None and not attrs:
        raise ValidationError("a retraction needs 'id' or the key attributes", where=where)
    return make_fact(
        user_id=window.user_id, entity_type=etype,
        entity_id=entity_id.strip() if entity_id else derive_entity_id(
            etype, attrs, f"{cited[0].turn_id}#{index}"),
        op=op, attributes=attrs, valid_time=valid, observed_time=observed,
        confidence=_confidence(raw.get("confidence", DEFAULT_CONFIDENCE), where),
        provenance=tuple(sorted({t.turn_id for t in cited})),
        supersedes=_supersedes(raw.get("supersedes", []), window, where), source=source)


def _cited_turns(value: Any, window: Window, where: str) -> list[Turn]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValidationError("'turns' must be a non-empty list of turn ids", where=where)
    cited = []
    for turn_id in value:
        turn = window.turn(turn_id)
        if turn is None:
            raise ValidationError(f"cites turn {turn_id!r}, which it was not given", where=where)
        cited.append(turn)
    if not any(t.from_user for t in cited):
        raise ValidationError("cites only assistant turns; facts come from what the user said",
                              where=where)
    return cited


def _typed_attributes(raw: Mapping[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    etype, attrs = raw.get("type"), raw.get("attributes", {})
    if not isinstance(etype, str) or not etype.strip() or len(etype) > 64:
        raise ValidationError("'type' must be an entity type name", where=where)
    if not isinstance(attrs, dict):
        raise ValidationError("'attributes' must be a JSON object", where=where)
    if len(orjson.dumps(attrs)) > MAX_ATTRIBUTE_BYTES:
        raise ValidationError(f"'attributes' are larger than {MAX_ATTRIBUTE_BYTES} bytes", where=where)
    etype = etype.strip()
    if get_type(etype) is None:  # no model for it: kept as a generic entity, never dropped
        attrs = {"kind": etype, **attrs}
        etype = GENERIC_TYPE
    return etype, validate_attributes(etype, attrs, where=where)


def _valid_time(value: Any, default: datetime, where: str) -> datetime:
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValidationError("'valid_time' must be an ISO 8601 date or time", where=where)
    try:
        moment = to_utc(value)
    except ValueError:
        raise ValidationError(f"'valid_time' is not an ISO 8601 date or time: {value!r}",
                              where=where) from None
    if not 1900 <= moment.year <= 2200:
        raise ValidationError(f"'valid_time' {value!r} is outside 1900..2200", where=where)
    return moment


def _confidence(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValidationError(f"'confidence' must be a number in [0, 1], got {value!r}", where=where)
    return float(value)


def _supersedes(value: Any, window: Window, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError("'supersedes' must be a list of fact ids", where=where)
    unknown = [v for v in value if v not in window.manifest_fact_ids]
    if unknown:
        raise ValidationError(f"supersedes {unknown}, which are not facts of the manifest it was "
                              "given", where=where)
    return tuple(sorted(set(value)))
