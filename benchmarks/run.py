"""``make bench``: measure uac against its performance targets, print a table, write results.json.

One run measures, in order:

1. fold throughput (``fold_window`` over 1,000-fact windows, and plain ``fold``);
2. the cost of checkpointing ONE new fact on a running pipeline whose history
   holds 1k / 10k / 100k facts (one user; many users), with the embedded
   default adapters and with the in-memory ones, and a full rebuild per new
   fact (the prototype's approach) at 10k facts of history;
3. aggregate query latency over one user's 100,000 records;
4. replay of a 1,000,000-fact log end to end, and its peak memory;
5. the extraction stage over the LoCoMo conversations with the offline model;
6. the Kafka worker on a real broker: turns/s end to end against a raw aiokafka
   passthrough of the same turns, and turn -> alert latency (p50/p99).

Options: ``--quick`` (smaller sizes, for development; writes
``results-quick.json``), ``--only fold,checkpoint,query,replay,extract,kafka``,
``--replay-timeout S``, ``--no-cache`` (regenerate the cached logs),
``--strict`` (exit 1 if a target fails). Generated logs are cached in
``benchmarks/.cache`` (keyed by the generator's and uac's codec source).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_checkpoint,
    bench_extract,
    bench_fold,
    bench_kafka,
    bench_query,
    bench_replay,
)
from benchmarks.config import Config
from benchmarks.harness import Figure, cpu_counters, machine_info, render_table, settle, steal_share

HERE = Path(__file__).resolve().parent
BENCHES: dict[str, Callable[[Config], list[Figure]]] = {
    "fold": bench_fold.run,
    "checkpoint": bench_checkpoint.run,
    "query": bench_query.run,
    "replay": bench_replay.run,
    "extract": bench_extract.run,
    "kafka": bench_kafka.run,
}
METHOD = {
    "timing": "time.perf_counter; garbage collected before each timed call/phase; medians of the "
              "stated number of repeats (column n) after warm-up runs",
    "data": "benchmarks/generator.py: random.Random(seed), fixed event times from 2024-01-01 (no "
            "wall clock); transactions dominate, then trips, purchases, calendar, health, contacts, "
            "preferences, budgets, documents; 15% updates, 2% retractions, 0.5% corrections "
            "(supersedes); entity ids from natural keys as parse_observation derives them",
    "fold": bench_fold.__doc__,
    "checkpoint": bench_checkpoint.__doc__,
    "query": bench_query.__doc__,
    "replay": bench_replay.__doc__,
    "extract": bench_extract.__doc__,
    "kafka": bench_kafka.__doc__,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (development)")
    parser.add_argument("--only", default=",".join(BENCHES),
                        help=f"comma-separated subset of {','.join(BENCHES)}")
    parser.add_argument("--replay-timeout", type=float, default=None,
                        help="stop the replay after this many seconds (default 300, quick 120)")
    parser.add_argument("--replay-facts", type=int, default=None, help="facts in the replay log")
    parser.add_argument("--no-cache", action="store_true", help="regenerate cached logs")
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default benchmarks/results.json, quick: results-quick.json)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target fails")
    args = parser.parse_args(argv)
    chosen = [b.strip() for b in args.only.split(",") if b.strip()]
    unknown = sorted(set(chosen) - set(BENCHES))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHES)}")

    work = Path(tempfile.mkdtemp(prefix="uac-bench-"))
    cfg = Config.make(quick=args.quick, work=work, use_cache=not args.no_cache,
                      replay_timeout=args.replay_timeout, replay_facts=args.replay_facts)
    out_path = args.out or HERE / ("results-quick.json" if args.quick else "results.json")
    machine = machine_info()
    print(f"uac benchmarks ({'quick' if args.quick else 'full'}): {machine.get('cpu', '?')}, "
          f"{machine['nproc']} CPUs, Python {machine['python']}, DuckDB {machine['duckdb']}",
          flush=True)
    figures: list[Figure] = []
    errors: dict[str, str] = {}
    phases: dict[str, float] = {}
    steal: dict[str, float | None] = {}
    load_before = os.getloadavg()
    run_counters = cpu_counters()
    started = time.perf_counter()
    try:
        for name in chosen:
            print(f"[{name}] running ...", flush=True)
            settle()
            phase = time.perf_counter()
            counters = cpu_counters()
            try:
                got = BENCHES[name](cfg)
            except Exception:
                errors[name] = traceback.format_exc()
                print(f"[{name}] FAILED:\n{errors[name]}", file=sys.stderr, flush=True)
                continue
            finally:
                phases[name] = round(time.perf_counter() - phase, 1)
                steal[name] = steal_share(counters, cpu_counters())
            figures.extend(got)
            stolen = f", CPU steal {steal[name]:.0f}%" if steal[name] is not None else ""
            print(f"[{name}] done in {phases[name]:.0f} s{stolen}", flush=True)
            print(render_table(got), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = time.perf_counter() - started
    run_steal = steal_share(run_counters, cpu_counters())
    figures.append(Figure("bench_peak_rss_mib", "peak memory (max RSS) of the benchmark process",
                          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "MiB", 1,
                          note="everything except the replay, which runs in its own process"))
    print()
    print(render_table(figures))
    primary = [f for f in figures if f.primary]
    failed = [f for f in primary if f.passed is False]
    print(f"\ntargets (*): {len(primary) - len(failed)} of {len(primary)} pass"
          + (f"; FAIL: {', '.join(f.key for f in failed)}" if failed else ""))
    if run_steal is not None:
        print(f"CPU steal over the run: {run_steal:.0f}% of CPU time (load average at start "
              f"{load_before[0]:.2f})" + ("; the host was busy, figures are noisy" if run_steal > 10
                                          else ""))
    if errors:
        print(f"benchmarks that crashed: {', '.join(errors)}", file=sys.stderr)
    results: dict[str, Any] = {
        "schema": 1,
        "mode": "quick" if args.quick else "full",
        "benchmarks": chosen,
        "machine": machine,
        "duration_s": round(total, 1),
        "phase_s": phases,
        "cpu_steal_pct": {"run": run_steal, **steal},
        "load_average_at_start": [round(v, 2) for v in load_before],
        "targets": {f.key: {"value": f.as_dict()["value"], "unit": f.unit,
                            "target": f.target_text(), "passed": f.passed} for f in primary},
        "figures": [f.as_dict() for f in figures],
        "errors": errors,
        "method": METHOD,
    }
    out_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {out_path} ({total:.0f} s)")
    if errors:
        return 1
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
