"""Replay of a 1,000,000-fact log end to end, and the peak memory it takes.

The log is a real data dir's ``facts.log``, written as the embedded pipeline
writes it (facts from 1,000 users over a year of event time, a clock tick at
every midnight, window marks where the window policy closes windows). The
replay itself, ``uac.api.replay(settings=...)``, runs in a child process so
its peak RSS is its own and a run that takes too long can be stopped: it reads
the log file, folds, runs the built-in rules, writes a new DuckDB file and
swaps it in. The child stops itself after ``--replay-timeout`` seconds; the
figure is then missing (FAIL) and the detail says how far it got.

Run ``python -m benchmarks.bench_replay child DATA_DIR [--stop-after S] [--profile OUT]``
to replay a data dir by hand (``--profile`` writes a cProfile report).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.config import Config
from benchmarks.datasets import cache_key, cached_log, copy_log, windowed, write_log
from benchmarks.generator import FactGenerator
from benchmarks.harness import Figure, settle

TARGET_SECONDS = 15.0


class _Stop(Exception):
    """Raised from the progress callback when the child's time is up."""


def build_log(cfg: Config, path: Path) -> None:
    """Write the replay log: ``cfg.replay_facts`` facts of ``cfg.replay_users`` users."""
    gen = FactGenerator(cfg.seed + 1, cfg.replay_users, span=timedelta(days=cfg.replay_days))
    write_log(path, windowed(gen.records(cfg.replay_facts, ticks=True)))


def run(cfg: Config) -> list[Figure]:
    """Build (or reuse) the log, replay it in a child process, report seconds and peak RSS."""
    from uac.settings import Settings

    key = cache_key("replay", cfg.seed, cfg.replay_facts, cfg.replay_users, cfg.replay_days)
    started = time.perf_counter()
    source = cached_log(f"replay-{cfg.replay_facts}", key, lambda p: build_log(cfg, p),
                        use_cache=cfg.use_cache)
    build_seconds = time.perf_counter() - started
    settings = Settings(data_dir=cfg.work / "replay")
    copy_log(source, settings.log_path)
    settle()
    result = _run_child(settings.data_dir, cfg.replay_timeout)
    counts = _store_counts(settings.store_path) if result.get("done") else {}
    log_bytes = settings.log_path.stat().st_size
    detail: dict[str, Any] = {
        "facts": cfg.replay_facts, "users": cfg.replay_users, "event_time_days": cfg.replay_days,
        "log_mib": round(log_bytes / 2**20, 1), "log_build_or_cache_s": round(build_seconds, 1),
        "timeout_s": cfg.replay_timeout, **result, **counts,
    }
    seconds = result.get("seconds") if result.get("done") else None
    note = (f"{cfg.replay_facts:,} facts, {cfg.replay_users:,} users, {cfg.replay_days} days of event "
            "time, a tick every midnight; uac.api.replay() in a child process: read + decode the "
            "log, fold, built-in rules, write a new DuckDB file; one run")
    if not result.get("done"):
        done, total = result.get("stopped_at_records", 0), result.get("log_records", 0)
        note += (f"; STOPPED after {result.get('stopped_after_s', 0):.0f} s at {done:,} of {total:,} "
                 f"log records, linear extrapolation {result.get('extrapolated_s', 0):.0f} s "
                 "(a lower bound: the rate falls as the state grows)")
    peak = result.get("maxrss_kib")
    if peak is None:  # the child was killed: the largest waited-for child is the replay
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    stopped = None
    if not result.get("done"):
        total = result.get("log_records") or 1
        share = 100 * result.get("stopped_at_records", 0) / total
        stopped = (f"> {result.get('stopped_after_s', cfg.replay_timeout):.0f} s (stopped at "
                   f"{share:.0f}%, ~{result.get('extrapolated_s', 0):.0f} s extrapolated)")
    at_stop = "" if result.get("done") else " (at the stop)"
    return [
        Figure("replay_1m_seconds", f"replay of {cfg.replay_facts:,} facts", seconds, "s", 1,
               TARGET_SECONDS, "max", primary=True, detail=detail, note=note, display=stopped),
        Figure("replay_facts_per_s", "replay throughput" + at_stop,
               cfg.replay_facts / seconds if seconds else result.get("records_per_s_so_far"),
               "facts/s", 1, note="facts / replay seconds (when stopped: log records/s so far)"),
        Figure("replay_peak_rss_mib", "peak memory (max RSS) of the replay process" + at_stop,
               peak / 1024, "MiB", 1,
               note="resource.getrusage(RUSAGE_SELF).ru_maxrss in the replay child after the replay "
                    "(interpreter and imports included)" + (
                        "; the replay was stopped, so this is the peak up to the stop" if at_stop
                        else "")),
    ]


def _run_child(data_dir: Path, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench_replay", "child", str(data_dir),
           "--stop-after", str(timeout)]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root, env=env)
    assert proc.stdout is not None
    last: dict[str, Any] = {}
    deadline = time.monotonic() + timeout + 120  # the child stops itself; this is a safety net
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buffer = b""
    shown = time.monotonic()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            proc.kill()
            proc.wait()
            last["killed"] = True
            break
        if not sel.select(timeout=min(remaining, 5.0)):
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                last.update(json.loads(line))
        if time.monotonic() - shown >= 30 and "progress_records" in last:
            shown = time.monotonic()
            total = last.get("log_records") or 1
            print(f"  replay: {last['progress_records']:,} of {total:,} log records "
                  f"after {last['progress_s']:.0f} s", flush=True)
    sel.close()
    proc.wait()
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, None) and not last.get("done"):
        last["child_error"] = stderr.strip().splitlines()[-5:]
    return last


def _store_counts(path: Path) -> dict[str, Any]:
    """Rows in the rebuilt store's main tables (those that exist), and its size."""
    import duckdb

    out: dict[str, Any] = {"store_mib": round(path.stat().st_size / 2**20, 1)}
    con = duckdb.connect(str(path), read_only=True)
    try:
        for table in ("facts", "entities", "alerts", "alert_events"):
            try:
                row = con.execute(f"SELECT count(*) FROM store.{table}").fetchone()
            except duckdb.Error:
                continue
            out[f"rows_{table}"] = int(row[0]) if row else 0
    finally:
        con.close()
    return out


# -- the child -------------------------------------------------------------------------------------
def child(data_dir: Path, stop_after: float | None, profile: Path | None) -> int:
    """Replay ``data_dir`` and print JSON lines: progress, then the result."""
    from uac import api
    from uac.settings import Settings
    from uac.streams.log import FileFactLog

    settings = Settings(data_dir=data_dir)
    with FileFactLog(settings.log_path, writer=False) as reader:
        total = reader.end_offset()
    emit({"log_records": total})
    state = {"records": 0, "reported": 0.0}
    started = time.perf_counter()

    def progress(n: int) -> None:
        state["records"] += n
        now = time.perf_counter() - started
        if now - state["reported"] >= 2.0:
            state["reported"] = now
            emit({"progress_records": state["records"], "progress_s": round(now, 2)})
        if stop_after is not None and now > stop_after:
            raise _Stop

    profiler = None
    if profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        summary = api.replay(settings=settings, progress=progress)
        seconds = time.perf_counter() - started
        emit({"done": True, "seconds": round(seconds, 3), "replay_summary_s": round(summary.seconds, 3),
              "windows": summary.windows, "replayed_facts": summary.facts,
              "replayed_users": summary.users, "records": summary.log_records,
              "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
    except _Stop:
        elapsed = time.perf_counter() - started
        done = max(state["records"], 1)
        emit({"done": False, "stopped_at_records": state["records"],
              "stopped_after_s": round(elapsed, 2),
              "extrapolated_s": round(elapsed * total / done, 1),
              "records_per_s_so_far": round(done / elapsed),
              "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
    finally:
        if profiler is not None and profile is not None:
            import pstats

            profiler.disable()
            with open(profile, "w") as fh:
                stats = pstats.Stats(profiler, stream=fh)
                stats.sort_stats("tottime").print_stats(40)
                stats.sort_stats("cumulative").print_stats(60)
    return 0


def emit(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_replay")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("child", help="replay DATA_DIR, printing JSON lines")
    one.add_argument("data_dir", type=Path)
    one.add_argument("--stop-after", type=float, default=None)
    one.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args(argv)
    return child(args.data_dir, args.stop_after, args.profile)


if __name__ == "__main__":
    sys.exit(main())
