"""The library API: what the ``uac`` command does, as typed functions an agent framework calls.

Writers (:func:`ingest`, :func:`tick`, :func:`replay`) take the log's writer
lock; readers open the state store read-only and wait up to
``settings.lock_timeout`` seconds while a writer is committing.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import orjson

from uac.checkpointer.checkpointer import Checkpointer, RuleSettings
from uac.checkpointer.duckdb_store import DuckDBStateStore
from uac.checkpointer.fold import as_of, fold
from uac.checkpointer.records import EntityRow
from uac.checkpointer.state import UserState
from uac.checkpointer.store import dump
from uac.domains.facts import Fact, Op
from uac.errors import ValidationError
from uac.executor.alerts import Alert, AlertEvent, AlertStatus
from uac.executor.query import QueryResult
from uac.extraction.ledger import JsonlExtractionLedger, UsageTotal
from uac.extraction.locomo import locomo_turns
from uac.extraction.turns import Turn
from uac.settings import Settings
from uac.streams.embedded import EmbeddedPipeline, IngestSummary, default_rules
from uac.streams.log import FileFactLog
from uac.streams.rejects import InMemoryRejectStore, JsonlRejectStore, Reject

log = logging.getLogger(__name__)

__all__ = [
    "FactStatus", "FactView", "ReplaySummary", "alert_events", "alerts", "fact_views", "facts",
    "ingest", "ingest_turns", "query", "read_locomo", "rejects", "replay", "select_alerts", "state",
    "tick", "usage", "user_state", "users",
]


# -- writing ------------------------------------------------------------------------------------
INPUT_FORMATS = ("jsonl", "locomo")


def ingest(source: Path | str | Iterable[bytes | str], *, settings: Settings,
           progress: Callable[[int], None] | None = None,
           metrics_file: Path | None = None, format: str = "jsonl") -> IngestSummary:
    """Ingest a file (or lines) into the memory in ``settings.data_dir``.

    ``format="jsonl"``: JSON Lines of observations, ticks and conversation turns (turns are
    extracted into facts by ``settings.model_name``). ``format="locomo"``: a LoCoMo
    conversation file, each speaker a user (see :mod:`uac.extraction.locomo`).
    ``metrics_file``: also write this run's Prometheus metrics there (text format, e.g. for
    node_exporter's textfile collector).
    """
    if format not in INPUT_FORMATS:
        raise ValidationError(f"unknown input format {format!r}; use one of {INPUT_FORMATS}")
    with EmbeddedPipeline(settings) as pipeline:
        if format == "locomo":
            path = Path(source)  # type: ignore[arg-type]
            summary = pipeline.ingest_turns(read_locomo(path), progress)
        elif isinstance(source, Path | str):
            path = Path(source)
            with open(path, "rb") as fh:
                summary = pipeline.ingest_lines(fh, path.name, progress)
        else:
            summary = pipeline.ingest_lines(source, "<input>", progress)
        if metrics_file is not None:
            from prometheus_client import write_to_textfile

            write_to_textfile(str(metrics_file), pipeline.metrics.registry)
        return summary


def read_locomo(path: Path) -> list[Turn]:
    """The turns of a LoCoMo file (see :func:`uac.extraction.locomo.locomo_turns`)."""
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"not valid JSON ({exc})", where=str(path)) from None
    return list(locomo_turns(data, path.stem))


def ingest_turns(turns: Iterable[Turn], *, settings: Settings,
                 progress: Callable[[int], None] | None = None) -> IngestSummary:
    """Extract facts from conversation turns (library use) and fold them, like :func:`ingest`."""
    with EmbeddedPipeline(settings) as pipeline:
        return pipeline.ingest_turns(turns, progress)


def usage(*, settings: Settings, user_id: str | None = None) -> dict[tuple[str, str], UsageTotal]:
    """Model use of extraction per (user, model): windows, calls, turns, tokens, cost."""
    ledger = JsonlExtractionLedger(settings.data_dir)
    try:
        totals = ledger.usage()
    finally:
        ledger.close()
    return {k: v for k, v in sorted(totals.items()) if user_id is None or k[0] == user_id}


def tick(at: datetime, *, settings: Settings) -> IngestSummary:
    """Advance event time to ``at`` so time-based rules run (recorded in the log)."""
    with EmbeddedPipeline(settings) as pipeline:
        return pipeline.tick(at)


REPLAY_COMMIT_WINDOWS = 100
"""A replay commits every this many windows, so its outputs never pile up in memory."""


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What a replay rebuilt, how long it took, and (with ``check``) whether it matched."""

    log_records: int
    facts: int
    windows: int
    users: int
    seconds: float
    matches: bool | None = None


def replay(*, settings: Settings, check: bool = False,
           progress: Callable[[int], None] | None = None) -> ReplaySummary:
    """Rebuild the state store from the log alone (offset 0), in a new file.

    With ``check`` the current store is kept and compared byte for byte with the
    rebuilt one (``matches``); otherwise the rebuilt store replaces it atomically.
    """
    target = settings.store_path.with_name(settings.store_path.name + ".replay")
    _remove_db(target)
    started = time.perf_counter()
    with FileFactLog(settings.log_path) as log_, DuckDBStateStore(target) as store:
        checkpointer = Checkpointer(
            log_, store, InMemoryRejectStore(), default_rules(),
            rule_settings=RuleSettings(settings.rule_days_ahead, settings.lapse_days_ahead))
        run = checkpointer.run(commit_every=REPLAY_COMMIT_WINDOWS, progress=progress)
        records = log_.end_offset()
        rebuilt = dump(store) if check else b""
    seconds = time.perf_counter() - started
    matches = None
    if check:
        with _reader(settings) as current:
            matches = dump(current) == rebuilt
        _remove_db(target)
    else:
        os.replace(target, settings.store_path)
        _remove_db(Path(str(settings.store_path) + ".wal"))
    return ReplaySummary(records, run.facts, run.windows, len(run.users), seconds, matches)


def _remove_db(path: Path) -> None:
    for candidate in (path, Path(str(path) + ".wal")):
        candidate.unlink(missing_ok=True)


# -- reading ------------------------------------------------------------------------------------
@contextmanager
def _reader(settings: Settings) -> Iterator[DuckDBStateStore]:
    store = DuckDBStateStore(settings.store_path, read_only=True,
                             lock_timeout=settings.lock_timeout)
    try:
        yield store
    finally:
        store.close()


def users(*, settings: Settings) -> list[str]:
    """Every user the memory knows."""
    with _reader(settings) as store:
        return store.users()


def user_state(user_id: str, *, settings: Settings) -> UserState:
    """The user's full folded state (entities with history), rebuilt from the stored facts."""
    with _reader(settings) as store:
        facts_ = store.load_facts(user_id)
    return fold(facts_).get(user_id) or UserState(user_id)


def state(user_id: str, *, settings: Settings, known_at: datetime | None = None,
          valid_at: datetime | None = None) -> list[EntityRow]:
    """The user's current entities; with ``known_at``/``valid_at``, what we believed then."""
    if known_at is None and valid_at is None:
        with _reader(settings) as store:
            return store.entities(user_id)
    past = as_of(user_state(user_id, settings=settings), known_at=known_at, valid_at=valid_at)
    return [EntityRow(user_id, v.entity_type, v.entity_id, True, v.attributes, 0)
            for v in past.current()]


class FactStatus(StrEnum):
    """Where a fact stands in the current state."""

    CURRENT = "current"
    """At least one current attribute value comes from it."""
    OVERRIDDEN = "overridden"
    """Every value it set was replaced by a later one (it stays in history)."""
    SUPERSEDED = "superseded"
    """A correction named it (or its source): it has no effect, but stays in history."""
    RETRACTED = "retracted"
    """A retraction, or an assert that a later retraction removed."""


@dataclass(frozen=True, slots=True)
class FactView:
    """A fact with its status and what superseded it."""

    fact: Fact
    status: FactStatus
    superseded_by: tuple[str, ...]


def facts(user_id: str, *, settings: Settings) -> list[FactView]:
    """Every fact of the user, in (valid time, observed time, id) order, with its status."""
    return fact_views(user_state(user_id, settings=settings))


def fact_views(user: UserState) -> list[FactView]:
    """Every fact of a folded user state, in (valid time, observed time, id) order, with its status."""
    out = []
    for entity in user.entities.values():
        winners = set(entity.live_fact_ids()) if entity.exists else set()
        for fact in entity.facts.values():
            refs = [fact.fact_id, *fact.provenance]
            by = sorted({s for r in refs for s in user.superseded.get(r, ())})
            if by:
                status = FactStatus.SUPERSEDED
            elif fact.fact_id in winners:
                status = FactStatus.CURRENT
            elif fact.op is Op.RETRACT or (entity.retracted_at is not None
                                           and fact.order_key < entity.retracted_at):
                status = FactStatus.RETRACTED
            else:
                status = FactStatus.OVERRIDDEN
            out.append(FactView(fact, status, tuple(by)))
    out.sort(key=lambda v: v.fact.order_key)
    return out


def alerts(user_id: str, *, settings: Settings,
           status: AlertStatus | None = None) -> list[Alert]:
    """The user's alerts (open and resolved unless ``status`` says which), by raise time."""
    with _reader(settings) as store:
        return select_alerts(store.alerts(user_id), status)


def select_alerts(found: Iterable[Alert], status: AlertStatus | None = None) -> list[Alert]:
    """The alerts with this status (all if None), by raise time."""
    chosen = [a for a in found if status is None or a.status is status]
    return sorted(chosen, key=lambda a: (a.raised_at, a.alert_id))


def alert_events(user_id: str, *, settings: Settings) -> list[AlertEvent]:
    """The user's alert history: every raise and resolution, in order."""
    with _reader(settings) as store:
        return [e for _, _, e in store.alert_events(user_id)]


def query(user_id: str, sql: str, *, settings: Settings) -> QueryResult:
    """A read-only SQL SELECT over the user's typed tables, scoped to that user."""
    with _reader(settings) as store:
        return store.query(user_id, sql, timeout=settings.query_timeout)


def rejects(*, settings: Settings) -> list[Reject]:
    """Everything the pipeline refused, with where and why."""
    if not settings.rejects_path.exists():
        return []
    return list(JsonlRejectStore(settings.rejects_path))
