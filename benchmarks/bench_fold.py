"""Fold throughput: facts per second through ``fold_window`` (1,000-fact windows) and ``fold``.

Pure CPU, no I/O: the facts are generated beforehand, each repeat folds them
all into empty states. ``tracemalloc`` then measures the memory the folded
state takes (one more, untimed, run).
"""

from __future__ import annotations

import gc
import tracemalloc

from benchmarks.config import Config
from benchmarks.generator import FactGenerator, check_sample
from benchmarks.harness import Figure, median, repeat, settle
from uac.checkpointer.fold import bulk_gc, fold, fold_window
from uac.checkpointer.state import UserState

WINDOW = 1000
TARGET_FACTS_PER_S = 100_000


def run(cfg: Config) -> list[Figure]:
    """Measure ``fold_window`` and ``fold`` throughput over ``cfg.fold_facts`` facts."""
    facts = FactGenerator(cfg.seed, cfg.fold_users).facts(cfg.fold_facts)
    check_sample(facts[:5000])
    windows = [facts[i:i + WINDOW] for i in range(0, len(facts), WINDOW)]
    n = len(facts)

    def by_window() -> None:
        states: dict[str, UserState] = {}
        with bulk_gc():  # as the checkpointer runs it: one bulk_gc around all its windows
            for window in windows:
                fold_window(states, window)

    def plain() -> None:
        fold(facts)

    window_times = repeat(by_window, repeats=cfg.fold_repeats, warmup=1)
    plain_times = repeat(plain, repeats=cfg.fold_repeats, warmup=1)
    gc.disable()
    try:
        nogc_times = repeat(by_window, repeats=cfg.fold_repeats, warmup=0)
    finally:
        gc.enable()
    settle()
    tracemalloc.start()
    kept = fold(facts)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    settle()
    mix = f"{n:,} facts, {cfg.fold_users:,} users, default mix"
    return [
        Figure("fold_window_facts_per_s", "fold throughput, fold_window (1k-fact windows)",
               n / median(window_times), "facts/s", cfg.fold_repeats, TARGET_FACTS_PER_S, "min",
               primary=True,
               detail={"facts": n, "users": cfg.fold_users, "window": WINDOW,
                       "seconds": window_times},
               note=f"{mix}; fold_window per {WINDOW} facts into empty states, change "
                    "classification included, all windows inside one bulk_gc() as in the "
                    "checkpointer; median of repeats after 1 warm-up"),
        Figure("fold_facts_per_s", "fold throughput, plain fold", n / median(plain_times),
               "facts/s", cfg.fold_repeats, TARGET_FACTS_PER_S, "min",
               detail={"facts": n, "seconds": plain_times},
               note=f"{mix}; fold() in one call, no change classification"),
        Figure("fold_window_nogc_facts_per_s", "fold_window with the garbage collector off (diagnosis)",
               n / median(nogc_times), "facts/s", cfg.fold_repeats,
               detail={"seconds": nogc_times},
               note="as fold_window above with gc.disable(): the difference is the cyclic garbage "
                    "collector's share of the fold (uac runs with it on)"),
        Figure("fold_state_peak_mib", "fold: traced peak memory of the state", peak / 2**20, "MiB",
               1, detail={"facts": n},
               note="tracemalloc peak while folding all facts with fold() (the facts themselves "
                    "were allocated before tracing started)"),
    ]
