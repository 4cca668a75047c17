"""The cost of checkpointing one new fact, against the size of the history, and against a rebuild.

Incremental: a running :class:`~uac.streams.embedded.EmbeddedPipeline` whose
history holds N facts ingests ONE new fact: ``pipeline.ingest([fact])`` appends
it with a window mark to the log (fsync with the file log), folds the window,
runs the built-in rules the change selects and commits to the store. Timed per
fact, median over many new facts (after warm-up ones). The same new facts (one
user, own source ids, event time right after the history, same day) go to
every pipeline, so the history size is the only difference.

Adapters: ``duckdb`` is the embedded default (FileFactLog + DuckDBStateStore +
JSONL rejects in a temp dir); ``memory`` is InMemoryFactLog + InMemoryStateStore
+ InMemoryRejectStore (fold + rules cost without I/O).

Baseline (the prototype's approach): for the same new fact, rebuild everything
from the whole log: one window holding every history fact plus the new one is
folded from empty state, every rule runs over every user's state, and the whole
state (facts, entities, alerts, state changes) is written to a fresh store.
Favouring the baseline: its facts are already decoded in memory (no log read,
no append, no fsync) and the fresh store's schema is created before the clock
starts.

History scenarios: ``one user`` (every fact is that user's: the whole log is the
user's log) and ``many users`` (100 users; the new facts go to the busiest).
History logs are cut into 10,000-fact windows by size only, to keep set-up short
(the pipeline's recovery folds them); the state they fold into does not depend
on where windows are cut. The new facts use the default window policy.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.config import Config
from benchmarks.datasets import memory_log, windowed, write_log
from benchmarks.generator import FactGenerator
from benchmarks.harness import Figure, median, percentile, settle, timed
from uac.checkpointer.checkpointer import Checkpointer, RuleSettings
from uac.checkpointer.duckdb_store import DuckDBStateStore
from uac.checkpointer.store import InMemoryStateStore, StateStore
from uac.domains.facts import Fact, LogRecord, WindowMark
from uac.settings import Settings
from uac.streams.embedded import EmbeddedPipeline, default_rules
from uac.streams.log import InMemoryFactLog
from uac.streams.rejects import InMemoryRejectStore

HISTORY_END = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)
"""Event time where every history ends and the new facts start (noon: no day change)."""
HISTORY_WINDOW = 10_000
"""Facts per window in the history logs (set-up only: fewer windows, same folded state)."""
TARGET_RATIO = 1.5
TARGET_SPEEDUP = 100.0
ONE = "one user"
MANY = "many users"
USER = "user-00000"


@dataclass(frozen=True, slots=True)
class Timing:
    """Per-new-fact seconds of one pipeline, and how long building it took."""

    samples: list[float]
    setup_s: float

    @property
    def median_ms(self) -> float:
        return median(self.samples) * 1000

    @property
    def p95_ms(self) -> float:
        return percentile(self.samples, 95) * 1000

    def detail(self) -> dict[str, Any]:
        return {"median_ms": round(self.median_ms, 3), "p95_ms": round(self.p95_ms, 3),
                "min_ms": round(min(self.samples) * 1000, 3), "samples": len(self.samples),
                "setup_s": round(self.setup_s, 2)}


def history(cfg: Config, scenario: str, size: int) -> list[Fact]:
    """``size`` facts ending at :data:`HISTORY_END`: one user's, or many users'."""
    days = max(size / cfg.one_user_facts_per_day, 1.0)
    span = timedelta(days=days)
    users: int | list[str] = [USER] if scenario == ONE else cfg.history_users_many
    seed = cfg.seed + (2 if scenario == ONE else 4)
    return FactGenerator(seed, users, start=HISTORY_END - span, span=span).facts(size)


def new_facts(cfg: Config) -> list[Fact]:
    """The new facts every pipeline ingests one at a time: the same for every history.

    ``USER``'s next facts in the default mix (new entities, updates, retractions and
    corrections of the facts before them in this list), 10 s apart from
    :data:`HISTORY_END`, with their own source ids.
    """
    count = cfg.new_facts + cfg.new_facts_warmup
    gen = FactGenerator(cfg.seed + 3, [USER], start=HISTORY_END + timedelta(seconds=1),
                        span=timedelta(seconds=10 * count), source_prefix="new")
    return gen.facts(count)


def _log_records(facts: list[Fact]) -> list[LogRecord]:
    return list(windowed(facts, window_facts=HISTORY_WINDOW, window_span=timedelta(days=36500)))


def start_pipeline(cfg: Config, adapter: str, name: str, records: list[LogRecord]) -> EmbeddedPipeline:
    """A started pipeline over a log already holding ``records`` (recovery folds them)."""
    settings = Settings(data_dir=cfg.work / f"ckpt-{name}")
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    if adapter == "memory":
        return EmbeddedPipeline(settings, log=memory_log(records), store=InMemoryStateStore(),
                                rejects=InMemoryRejectStore()).start()
    write_log(settings.log_path, records)
    return EmbeddedPipeline(settings).start()


def measure_incremental(cfg: Config, adapter: str, name: str, records: list[LogRecord],
                        fresh: list[Fact]) -> Timing:
    """Start a pipeline over ``records``, then time ``ingest([fact])`` for each new fact."""
    settle()
    holder: list[EmbeddedPipeline] = []
    setup = timed(lambda: holder.append(start_pipeline(cfg, adapter, name, records)))
    pipeline = holder[0]
    samples = []
    try:
        for index, fact in enumerate(fresh):
            if index == cfg.new_facts_warmup:
                settle()
            seconds = timed(lambda f=fact: pipeline.ingest([f]))  # type: ignore[misc]
            if index >= cfg.new_facts_warmup:
                samples.append(seconds)
    finally:
        pipeline.stop()
        shutil.rmtree(cfg.work / f"ckpt-{name}", ignore_errors=True)
    return Timing(samples, setup)


def measure_baseline(cfg: Config, adapter: str, name: str, facts: list[Fact],
                     fresh: list[Fact]) -> Timing:
    """Time a full rebuild (fold all + every rule for every user + write all to a fresh store)
    for each of ``cfg.baseline_repeats`` new facts."""
    folder = cfg.work / f"baseline-{name}"
    samples = []
    for index in range(cfg.baseline_repeats):
        fact = fresh[cfg.new_facts_warmup + index]
        log = InMemoryFactLog()
        log.append([*facts, fact, WindowMark(0, reason="end")])
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        store: StateStore = (InMemoryStateStore() if adapter == "memory"
                             else DuckDBStateStore(folder / "state.duckdb"))
        settle()
        samples.append(timed(lambda log=log, store=store: _rebuild(log, store)))  # type: ignore[misc]
    shutil.rmtree(folder, ignore_errors=True)
    return Timing(samples, 0.0)


def _rebuild(log: InMemoryFactLog, store: StateStore) -> None:
    checkpointer = Checkpointer(log, store, InMemoryRejectStore(), default_rules(),
                                rule_settings=RuleSettings())
    checkpointer.run(commit_every=None)
    store.close()


def run(cfg: Config, progress: Callable[[str], None] = print) -> list[Figure]:
    """Incremental cost at three history sizes, two adapters, two scenarios; baselines at the mid size."""
    fresh = new_facts(cfg)
    sizes = (cfg.history_small, cfg.history_mid, cfg.history_large)
    plan = [(ONE, "duckdb"), (ONE, "memory"), (MANY, "duckdb")]
    timings: dict[tuple[str, str, int], Timing] = {}
    baselines: dict[tuple[str, str], Timing] = {}
    for scenario in (ONE, MANY):
        for size in sizes:
            facts = history(cfg, scenario, size)
            records = _log_records(facts)
            for scen, adapter in plan:
                if scen != scenario:
                    continue
                name = f"{scenario.replace(' ', '-')}-{adapter}-{size}"
                timing = measure_incremental(cfg, adapter, name, records, fresh)
                timings[(scenario, adapter, size)] = timing
                progress(f"  incremental {scenario:10} {adapter:6} history {size:>7,}: "
                         f"{timing.median_ms:8.2f} ms/fact (setup {timing.setup_s:.1f} s)")
                if size == cfg.history_mid:
                    base = measure_baseline(cfg, adapter, name, facts, fresh)
                    baselines[(scenario, adapter)] = base
                    progress(f"  rebuild     {scenario:10} {adapter:6} history {size:>7,}: "
                             f"{base.median_ms:8.1f} ms/fact")
            del facts, records
            settle()
    return _figures(cfg, timings, baselines, sizes)


def _figures(cfg: Config, timings: dict[tuple[str, str, int], Timing],
             baselines: dict[tuple[str, str], Timing], sizes: tuple[int, int, int]) -> list[Figure]:
    small, mid, large = sizes
    what = {"duckdb": "FileFactLog+DuckDB", "memory": "in-memory adapters"}
    combos = list(dict.fromkeys((s, a) for s, a, _ in timings))
    costs: list[Figure] = []
    ratios: list[Figure] = []
    rebuilds: list[Figure] = []
    for scenario, adapter in combos:
        slug = f"{scenario.replace(' ', '_')}_{adapter}"
        primary = scenario == ONE and adapter == "duckdb"
        for size in sizes:
            timing = timings.get((scenario, adapter, size))
            if timing is not None:
                costs.append(Figure(
                    f"checkpoint_one_fact_{slug}_{size}_ms",
                    f"checkpoint 1 new fact, {scenario}, {what[adapter]}, history {_k(size)}",
                    timing.median_ms, "ms", len(timing.samples), detail=timing.detail(),
                    note="EmbeddedPipeline.ingest([fact]) on a running pipeline: append (+fsync), "
                         "fold, rules, commit; median over the new facts after warm-up"))
        lo, hi = timings.get((scenario, adapter, small)), timings.get((scenario, adapter, large))
        if lo is not None and hi is not None:
            ratios.append(Figure(
                f"checkpoint_ratio_{slug}",
                f"checkpoint cost ratio {_k(large)}/{_k(small)} history, {scenario}, {what[adapter]}",
                hi.median_ms / lo.median_ms, "x", len(hi.samples), TARGET_RATIO, "max",
                primary=primary,
                detail={f"history_{small}_ms": round(lo.median_ms, 3),
                        f"history_{large}_ms": round(hi.median_ms, 3)},
                note="median cost of one new fact with the large history / with the small one"))
        base, inc = baselines.get((scenario, adapter)), timings.get((scenario, adapter, mid))
        if base is not None and inc is not None:
            rebuilds.append(Figure(
                f"rebuild_one_fact_{slug}_{mid}_ms",
                f"full rebuild per new fact, {scenario}, {what[adapter]}, history {_k(mid)}",
                base.median_ms, "ms", len(base.samples), detail=base.detail(),
                note="baseline: fold all facts + the new one from empty state in one window, "
                     "every rule for every user, write the full state to a fresh store (schema "
                     "pre-created, facts already decoded in memory, no log append/fsync)"))
            rebuilds.append(Figure(
                f"speedup_vs_rebuild_{slug}",
                f"incremental vs full rebuild, {scenario}, {what[adapter]}, history {_k(mid)}",
                base.median_ms / inc.median_ms, "x", len(inc.samples), TARGET_SPEEDUP, "min",
                primary=primary,
                detail={"incremental_ms": round(inc.median_ms, 3),
                        "rebuild_ms": round(base.median_ms, 3)},
                note="median full-rebuild time / median incremental time for one new fact"))
    return costs + ratios + rebuilds


def _k(size: int) -> str:
    return f"{size // 1000}k" if size % 1000 == 0 else f"{size:,}"

