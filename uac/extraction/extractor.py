"""The extraction stage: one window of a user's turns in, validated facts and rejects out.

One model call per window (plus bounded retries). What a call returns is parsed,
repaired once locally, asked for once more if still unusable, and validated fact
by fact. Whatever fails is returned as a :class:`~uac.streams.rejects.Reject`
holding the turns, the raw answer and the reason: the caller keeps it and goes on
with the next window. The stage holds no state and does no I/O beyond the model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from uac.checkpointer.state import UserState
from uac.domains.facts import Fact, JsonValue, iso
from uac.errors import ModelError
from uac.extraction.answer import AnswerError, Window, parse_answer, validate_facts
from uac.extraction.model import ChatModel, ModelAnswer
from uac.extraction.prompt import PROMPT_VERSION, build_messages, manifest_of, repair_message
from uac.extraction.turns import Turn
from uac.streams.rejects import Reject

log = logging.getLogger(__name__)
CALL_VERSION = 1
SOURCE_PREFIX = "extract:"
"""Every extracted fact's ``source`` starts with it (then the prompt version and the model)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries of retriable model errors: ``retries`` more attempts, exponential backoff."""

    retries: int = 3
    backoff: float = 1.0
    backoff_max: float = 30.0

    def delay(self, attempt: int) -> float:
        return float(min(self.backoff_max, self.backoff * 2 ** attempt))


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One window's model use: tokens, cost, attempts and outcome (``ok``/``repaired``/``failed``)."""

    user_id: str
    model: str
    turn_ids: tuple[str, ...]
    at: datetime
    """Event time: the window's last turn."""
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    seconds: float
    outcome: str
    reason: str = ""
    version: int = CALL_VERSION

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user_id, "model": self.model, "turns": list(self.turn_ids),
                "at": iso(self.at), "calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost": self.cost,
                "seconds": round(self.seconds, 6), "outcome": self.outcome, "reason": self.reason,
                "version": self.version}


@dataclass(slots=True)
class WindowResult:
    """What one window produced: facts, rejects, and its model use (None: nothing to ask)."""

    user_id: str
    turns: Sequence[Turn]
    facts: list[Fact] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    call: ModelCall | None = None
    stage_seconds: float = 0.0
    """Time spent in the stage outside the model calls (prompt, parse, validation)."""


@dataclass(slots=True)
class _Usage:
    calls: int = 0
    prompt: int = 0
    completion: int = 0
    cost: float = 0.0
    seconds: float = 0.0
    answers: list[str] = field(default_factory=list)

    def add(self, answer: ModelAnswer) -> None:
        self.calls += 1
        self.prompt += answer.prompt_tokens
        self.completion += answer.completion_tokens
        self.cost += answer.cost
        self.seconds += answer.seconds
        self.answers.append(answer.text)


class Extractor:
    """Turns windows into facts with a :class:`ChatModel`. ``sleep`` waits between retries."""

    def __init__(self, model: ChatModel, *, retry: RetryPolicy | None = None,
                 manifest_limit: int = 200, sleep: Callable[[float], None] = time.sleep) -> None:
        self.model = model
        self.retry = retry or RetryPolicy()
        self.manifest_limit = manifest_limit
        self.source = f"{SOURCE_PREFIX}{PROMPT_VERSION}:{model.name}"
        self._sleep = sleep

    def manifest(self, state: UserState | None) -> list[dict[str, JsonValue]]:
        """The prompt's index of what memory holds for the user (:func:`manifest_of`)."""
        return manifest_of(state, self.manifest_limit)

    def extract(self, turns: Sequence[Turn], state: UserState | None = None, *,
                manifest: list[dict[str, JsonValue]] | None = None) -> WindowResult:
        """Extract one window of one user's turns; ``state`` is what memory holds for the user
        (or ``manifest``: its :meth:`manifest`, built by a caller whose state may change while the
        model runs in another thread)."""
        started = time.perf_counter()
        user_id = turns[0].user_id
        if any(t.user_id != user_id for t in turns):
            raise ValueError("a window holds the turns of one user")
        result = WindowResult(user_id, turns)
        if not any(t.from_user for t in turns):
            return result  # assistant turns only: nothing the user said, no call
        if manifest is None:
            manifest = self.manifest(state)
        window = Window(user_id, turns, frozenset(
            fid for entry in manifest for fid in entry["facts"]))
        usage = _Usage()
        messages = build_messages(turns, manifest)
        try:
            raw_facts, repaired = self._answer(messages, usage)
        except (ModelError, AnswerError) as exc:
            step = "extract.model" if isinstance(exc, ModelError) else "extract.parse"
            reason = exc.reason if isinstance(exc, AnswerError) else str(exc)
            result.rejects.append(self._reject(step, window, reason, {"answers": usage.answers}))
            result.call = self._call(window, usage, "failed", reason)
        else:
            result.facts, fact_rejects = validate_facts(raw_facts, window, self.source)
            for bad in fact_rejects:
                result.rejects.append(self._reject(
                    "extract.validate", window, f"fact {bad.index}: {bad.reason}", {"fact": bad.raw}))
            result.call = self._call(window, usage, "repaired" if repaired else "ok", "")
        result.stage_seconds = max(0.0, time.perf_counter() - started - usage.seconds)
        return result

    def _answer(self, messages: list[dict[str, str]], usage: _Usage) -> tuple[list[Any], bool]:
        """The answer's raw facts: a call, a local repair, and one more call if still unusable."""
        answer = self._complete(messages, usage)
        try:
            parsed = parse_answer(answer.text)
            return parsed.facts, parsed.repaired
        except AnswerError as exc:
            log.warning("[extract.parse] %s; asking once more", exc.reason)
            again = [*messages, {"role": "assistant", "content": answer.text[:4000]},
                     repair_message(exc.reason)]
        answer = self._complete(again, usage)
        return parse_answer(answer.text).facts, True

    def _complete(self, messages: list[dict[str, str]], usage: _Usage) -> ModelAnswer:
        """One call, retried with backoff while the error is retriable (bounded)."""
        attempt = 0
        while True:
            try:
                answer = self.model.complete(messages)
            except ModelError as exc:
                usage.calls += 1
                if not exc.retriable or attempt >= self.retry.retries:
                    raise ModelError(f"{exc} (after {attempt + 1} attempt(s))",
                                     retriable=exc.retriable, status=exc.status,
                                     step_id="extract.model") from exc
                delay = self.retry.delay(attempt)
                log.warning("[extract.model] %s; retry %d in %.2f s", exc, attempt + 1, delay)
                self._sleep(delay)
                attempt += 1
                continue
            usage.add(answer)
            return answer

    def _call(self, window: Window, usage: _Usage, outcome: str, reason: str) -> ModelCall:
        return ModelCall(window.user_id, self.model.name, tuple(t.turn_id for t in window.turns),
                         max(t.timestamp for t in window.turns), usage.calls, usage.prompt,
                         usage.completion, usage.cost, usage.seconds, outcome, reason)

    def _reject(self, step_id: str, window: Window, reason: str, extra: dict[str, Any]) -> Reject:
        turns = window.turns
        where = f"user {window.user_id}, turns {turns[0].turn_id}..{turns[-1].turn_id}"
        payload = {"turns": [t.to_json() for t in turns], **extra}
        return Reject(step_id, where, reason, orjson.dumps(payload).decode())

