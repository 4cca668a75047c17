"""The embedded pipeline: every stage in one process over a local log and a DuckDB file.

Input lines are parsed (step ``ingest.parse``), new facts appended to the log
with window marks (``log.append``), the log fsynced, and the checkpointer folds
the closed windows, runs rules and commits (``checkpoint``). Bad lines go to
the reject store with their reason; the good ones keep flowing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType

from uac.checkpointer.checkpointer import Checkpointer, CheckpointSummary, RuleSettings
from uac.checkpointer.duckdb_store import DuckDBStateStore
from uac.checkpointer.store import StateStore
from uac.checkpointer.windows import WindowPolicy, with_marks
from uac.domains.facts import Fact, LogRecord, Tick, WindowMark
from uac.errors import ValidationError
from uac.executor.rules import Rule
from uac.extraction.turns import Turn, is_turn, parse_turn
from uac.metrics import Metrics
from uac.settings import Settings
from uac.streams.conversations import ExtractionSummary, TurnStage
from uac.streams.log import FactLog, FileFactLog
from uac.streams.observations import decode_line, parse_observation
from uac.streams.rejects import JsonlRejectStore, Reject, RejectStore

log = logging.getLogger(__name__)
CHUNK_LINES = 20_000


@dataclass
class IngestSummary:
    """What an ingest did, line by line and window by window."""

    lines: int = 0
    appended: int = 0
    duplicates: int = 0
    rejected: int = 0
    ticks: int = 0
    windows: int = 0
    raised: int = 0
    resolved: int = 0
    rule_failures: int = 0
    users: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    extraction: ExtractionSummary | None = None
    """Set when the input held conversation turns."""

    def add(self, run: CheckpointSummary) -> None:
        self.windows += run.windows
        self.raised += run.raised
        self.resolved += run.resolved
        self.rule_failures += run.rule_failures
        self.users = sorted(set(self.users) | run.users)


def default_rules() -> tuple[Rule, ...]:
    from uac.executor.builtin import BUILTIN_RULES

    return tuple(BUILTIN_RULES)


class EmbeddedPipeline:
    """Log + store + rejects + checkpointer in one process. Use ``with`` or start()/stop()."""

    def __init__(self, settings: Settings, *, rules: Sequence[Rule] | None = None,
                 log: FactLog | None = None, store: StateStore | None = None,
                 rejects: RejectStore | None = None, metrics: Metrics | None = None,
                 turns: TurnStage | None = None) -> None:
        self.settings = settings
        self.rules = tuple(default_rules() if rules is None else rules)
        self.metrics = metrics or Metrics()
        self._log, self._store, self._rejects = log, store, rejects
        self._turns = turns
        self._checkpointer: Checkpointer | None = None
        self._policy = WindowPolicy(settings.window_facts, settings.window_span)
        self._next_window = 0
        self._watermark: datetime | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> EmbeddedPipeline:
        """Open the log (taking the writer lock), the store and the rejects; recover a crash."""
        s = self.settings
        try:
            if self._log is None:
                self._log = FileFactLog(s.log_path)
            if self._store is None:
                self._store = DuckDBStateStore(s.store_path, lock_timeout=s.lock_timeout, share=True)
            if self._rejects is None:
                self._rejects = JsonlRejectStore(s.rejects_path)
            self._checkpointer = Checkpointer(
                self._log, self._store, self._rejects, self.rules,
                rule_settings=RuleSettings(s.rule_days_ahead, s.lapse_days_ahead),
                metrics=self.metrics)
            self._recover()
        except BaseException:
            self._checkpointer = None  # nothing more is written: only release what was opened
            self.stop()
            raise
        return self

    def _recover(self) -> None:
        """Fold windows a crash left uncommitted, then close a window it left open."""
        self.checkpointer.run(commit_every=None)
        checkpoint = self.checkpointer.checkpoint
        self._next_window = checkpoint.window_id + 1
        self._watermark = checkpoint.watermark
        if self.log.end_offset() > checkpoint.log_offset:  # records a crash left unwindowed
            tail = [r for _, r in self.log.read(checkpoint.log_offset)]
            self._advance_watermark(tail)
            if self._resume_window(tail):
                log.warning("continuing the window a previous run left open at offset %d "
                            "(%d records)", checkpoint.log_offset, len(tail))
                return
            log.warning("closing the window a previous run left open at offset %d",
                        checkpoint.log_offset)
            self._append([WindowMark(self._next_window, reason="recovery")])
            self._next_window += 1
            self.checkpointer.run(commit_every=None)

    def _resume_window(self, tail: list[LogRecord]) -> bool:
        """Feed the records a crash left after the last window mark to the window policy, as
        their writer did, so the next append cuts the windows a run without the crash would
        have cut (the same windows, the same state versions and alerts). Appends the mark the
        crash lost if the tail ends a window. False if the tail does not fit a single window
        (the caller then closes it as it is)."""
        policy = self._policy
        for i, record in enumerate(tail):
            if policy.closes_before(record) is not None:
                policy.reset()
                return False
            reason = policy.closes_after(record)
            if reason is not None:
                if i != len(tail) - 1:
                    policy.reset()
                    return False
                self._append([WindowMark(self._next_window, reason=reason)])
                self._next_window += 1
                self.checkpointer.run(commit_every=None)
        return True

    def stop(self) -> None:
        """Close a window left open (see :meth:`_resume_window`), then flush and close
        everything (releases the writer lock)."""
        if self._checkpointer is not None and self._policy.open:
            self._ingest_chunk([], IngestSummary(), final=True)
            self._checkpointer = None
        for part in (self._log, self._rejects, self._store):
            if part is not None:
                part.close()
        if self._turns is not None:
            self._turns.ledger.close()

    def __enter__(self) -> EmbeddedPipeline:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def log(self) -> FactLog:
        assert self._log is not None, "pipeline not started"
        return self._log

    @property
    def store(self) -> StateStore:
        assert self._store is not None, "pipeline not started"
        return self._store

    @property
    def rejects(self) -> RejectStore:
        assert self._rejects is not None, "pipeline not started"
        return self._rejects

    @property
    def checkpointer(self) -> Checkpointer:
        assert self._checkpointer is not None, "pipeline not started"
        return self._checkpointer

    @property
    def turn_stage(self) -> TurnStage:
        """The extraction stage (built from the settings on first use: litellm loads then)."""
        if self._turns is None:
            from uac.streams.extraction_setup import turn_stage_from

            self._turns = turn_stage_from(self.settings, self.metrics)
        return self._turns

    # -- ingest --------------------------------------------------------------------------------
    def ingest_lines(self, lines: Iterable[bytes | str], source: str = "<input>",
                     progress: Callable[[int], None] | None = None) -> IngestSummary:
        """Ingest JSON Lines of observations, ticks and conversation turns; a bad line is
        rejected with its reason and the others go on."""
        summary = IngestSummary()
        chunk: list[Fact | Tick] = []
        for number, line in enumerate(lines, start=1):
            summary.lines += 1
            self.metrics.records_in.labels("ingest.parse").inc()
            where = f"{source}:{number}"
            try:
                data = decode_line(line, where)
                record = None if data is None else (
                    parse_turn(data, where) if is_turn(data) else parse_observation(data, where))
            except ValidationError as exc:
                self._reject("ingest.parse", where, exc.reason, line, summary)
                continue
            if isinstance(record, Turn):
                chunk = self._take_turn(record, chunk, summary)
            elif isinstance(record, Tick) and self._turns is not None and self._turns.windows.pending:
                self._ingest_chunk(chunk, summary, final=False)  # turns before a tick go first
                self._extract_windows(self._turns.flush(), summary)
                chunk = [record]
            elif record is not None:
                chunk.append(record)
            if len(chunk) >= CHUNK_LINES:
                self._ingest_chunk(chunk, summary, final=False)
                chunk = []
            if progress is not None:
                progress(1)
        self._ingest_chunk(chunk, summary, final=True)
        if self._turns is not None:
            self._extract_windows(self._turns.flush(), summary)
        return summary

    def ingest_turns(self, turns: Iterable[Turn],
                     progress: Callable[[int], None] | None = None) -> IngestSummary:
        """Ingest conversation turns (library use): extracted in windows, facts appended."""
        summary = IngestSummary()
        for turn in turns:
            self._take_turn(turn, [], summary)
            if progress is not None:
                progress(1)
        self._extract_windows(self.turn_stage.flush(), summary)
        return summary

    def _take_turn(self, turn: Turn, chunk: list[Fact | Tick],
                   summary: IngestSummary) -> list[Fact | Tick]:
        stage = self.turn_stage
        summary.extraction = stage.summary
        closed = stage.add(turn)
        if closed:
            if chunk:  # observations before this turn go first
                self._ingest_chunk(chunk, summary, final=False)
            self._extract_windows(closed, summary)
            return []
        return chunk

    def _extract_windows(self, windows: list[list[Turn]], summary: IngestSummary) -> None:
        """Extract each window, append its facts and a tick at its last turn (when it has facts or
        starts a new day: a tick within the same day would change nothing), then mark it done."""
        stage = self.turn_stage
        for turns in windows:
            result = stage.extract(turns, self.checkpointer.user_state(turns[0].user_id))
            for reject in result.rejects:
                self._keep_reject(reject, summary)
            last = max(t.timestamp for t in turns)
            records: list[Fact | Tick] = list(result.facts)
            if records or self._watermark is None or last.date() > self._watermark.date():
                records.append(Tick(last))  # event time follows the conversation (a new day)
            self._ingest_chunk(records, summary, final=True)
            stage.done(result)
        if windows or summary.extraction is None:
            summary.extraction = stage.summary

    def ingest(self, records: Iterable[Fact | Tick]) -> IngestSummary:
        """Ingest already-built facts and ticks (library use)."""
        summary = IngestSummary()
        self._ingest_chunk(list(records), summary, final=True)
        return summary

    def tick(self, at: datetime) -> IngestSummary:
        """Advance event time to ``at`` (time-based rules run); recorded in the log."""
        return self.ingest([Tick(at)])

    def _reject(self, step_id: str, where: str, reason: str, payload: bytes | str,
                summary: IngestSummary) -> None:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        self._keep_reject(Reject(step_id, where, reason, text.rstrip("\n")[:65536]), summary)

    def _keep_reject(self, reject: Reject, summary: IngestSummary) -> None:
        self.rejects.add(reject)
        self.metrics.rejects.labels(reject.step_id).inc()
        summary.rejected += 1
        if len(summary.errors) < 100:
            summary.errors.append(f"{reject.source}: {reject.reason}")
        log.warning("[%s] rejected %s: %s", reject.step_id, reject.source, reject.reason)

    def _advance_watermark(self, records: Iterable[LogRecord]) -> None:
        for record in records:
            t = record.observed_time if isinstance(record, Fact) else (
                record.time if isinstance(record, Tick) else None)
            if t is not None and (self._watermark is None or t > self._watermark):
                self._watermark = t

    def _ingest_chunk(self, records: list[Fact | Tick], summary: IngestSummary,
                      *, final: bool) -> None:
        out: list[LogRecord] = []
        seen: set[str] = set()
        for record in records:
            if isinstance(record, Fact):
                if record.fact_id in seen or self.log.contains(record.fact_id):
                    summary.duplicates += 1
                    self.metrics.facts_duplicate.inc()
                    continue
                seen.add(record.fact_id)
            elif self._watermark is not None and record.time <= self._watermark:
                continue  # event time is already past this tick: nothing to advance
            else:
                summary.ticks += 1
            self._advance_watermark([record])
            marked, self._next_window = with_marks(self._policy, record, self._next_window)
            out += marked
        if final and self._policy.open:
            out.append(WindowMark(self._next_window, reason="end"))
            self._next_window += 1
            self._policy.reset()
        appended = self._append(out)
        summary.appended += sum(1 for r in out if isinstance(r, Fact)) if appended else 0
        summary.add(self.checkpointer.run(commit_every=None))

    def _append(self, records: list[LogRecord]) -> int:
        if not records:
            return 0
        result = self.log.append(records)
        # the log is durable before anything derived from it is committed
        self.log.flush()
        self.metrics.facts_appended.inc(sum(1 for r in records if isinstance(r, Fact)))
        return result.appended
