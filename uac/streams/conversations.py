"""The extraction stage inside the embedded pipeline: turns to windows to facts.

:class:`TurnStage` skips turns already extracted, batches the rest into
windows per user, runs the :class:`~uac.extraction.extractor.Extractor` on each
closed window and keeps its model use. The pipeline appends the window's facts
(and a clock tick at its last turn) and only then marks its turns extracted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from uac.checkpointer.state import UserState
from uac.extraction.extractor import Extractor, WindowResult
from uac.extraction.ledger import ExtractionLedger
from uac.extraction.turns import Turn
from uac.extraction.windows import TurnWindows, WindowPolicy
from uac.metrics import Metrics

log = logging.getLogger(__name__)
STEP_ID = "extract"


@dataclass(slots=True)
class ExtractionSummary:
    """What extraction did in one ingest: turns, windows, model use, time outside the model."""

    turns: int = 0
    turns_already_extracted: int = 0
    windows: int = 0
    windows_failed: int = 0
    facts: int = 0
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    model_seconds: float = 0.0
    stage_seconds: float = 0.0

    def per_turn(self) -> dict[str, float]:
        """Calls, prompt tokens and stage milliseconds per extracted turn."""
        n = max(self.turns, 1)
        return {"model_calls": self.model_calls / n, "prompt_tokens": self.prompt_tokens / n,
                "stage_ms": 1000 * self.stage_seconds / n}


class TurnStage:
    """Turns in, closed windows out, each extracted into a :class:`WindowResult`."""

    def __init__(self, extractor: Extractor, ledger: ExtractionLedger,
                 policy: WindowPolicy | None = None, metrics: Metrics | None = None) -> None:
        self.extractor = extractor
        self.ledger = ledger
        self.windows = TurnWindows(policy)
        self.metrics = metrics or Metrics()
        self.summary = ExtractionSummary()

    def add(self, turn: Turn) -> list[list[Turn]]:
        """Take a turn; the windows it closed. A turn extracted before is skipped."""
        self.metrics.records_in.labels(STEP_ID).inc()
        if self.ledger.extracted(turn.user_id, turn.turn_id):
            self.summary.turns_already_extracted += 1
            return []
        self.summary.turns += 1
        return self.windows.add(turn)

    def flush(self) -> list[list[Turn]]:
        return self.windows.flush()

    def extract(self, turns: Sequence[Turn], state: UserState | None) -> WindowResult:
        """Extract one window; record its model use (metrics, ledger, summary)."""
        result = self.extractor.extract(turns, state)
        s = self.summary
        s.windows += 1
        s.facts += len(result.facts)
        s.stage_seconds += result.stage_seconds
        call = result.call
        if call is not None:
            self.ledger.add_call(call)
            s.model_calls += call.calls
            s.prompt_tokens += call.prompt_tokens
            s.completion_tokens += call.completion_tokens
            s.cost += call.cost
            s.model_seconds += call.seconds
            s.windows_failed += int(call.outcome == "failed")
            m = self.metrics
            m.model_calls.labels(call.model, call.outcome).inc(call.calls)
            m.model_tokens.labels(call.model, "prompt").inc(call.prompt_tokens)
            m.model_tokens.labels(call.model, "completion").inc(call.completion_tokens)
            m.model_cost.labels(call.model).inc(call.cost)
        return result

    def done(self, result: WindowResult) -> None:
        """The window's facts are durable: its turns count as extracted (a failed one does not)."""
        if result.call is None or result.call.outcome != "failed":
            self.ledger.mark_extracted(result.user_id, [t.turn_id for t in result.turns])
        self.ledger.flush()
