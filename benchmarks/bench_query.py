"""Aggregate query latency over one user's 100,000 records (mostly transactions and trips).

The store is built by the library: a log file (cut into 10,000-fact windows to
keep set-up short), then ``uac.api.replay`` (log -> fold -> rules -> DuckDB
file). A few other users' rows sit beside the queried user's, as in any
shared store.
The library path, ``DuckDBStateStore.query(user, sql)`` on a store opened
read-only, runs each aggregate query (count, sum, avg, group-by, top-k, date
windows, a window function) round after round; p50/p95 are over all calls
after two warm-up calls per query. The CLI path (``uac query``, a new process
each time: interpreter start, imports, opening the store) is timed once or a
few times, for information.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.config import Config
from benchmarks.datasets import cache_key, cached_log, copy_log, windowed, write_log
from benchmarks.generator import MIX_QUERY, FactGenerator, OpMix
from benchmarks.harness import Figure, median, percentile, settle, timed
from uac.domains.facts import Fact

USER = "query-user"
TARGET_P50_MS = 10.0
START = datetime(2022, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=3 * 365)

QUERIES: dict[str, str] = {
    "count": "SELECT count(*) FROM transactions",
    "sum_month": ("SELECT sum(amount) FROM transactions "
                  "WHERE date >= DATE '2024-06-01' AND date < DATE '2024-07-01'"),
    "by_category": ("SELECT category, count(*) AS n, sum(amount) AS total, avg(amount) AS mean "
                    "FROM transactions GROUP BY category ORDER BY total DESC"),
    "top_merchants": ("SELECT merchant, sum(amount) AS total FROM transactions "
                      "WHERE date >= DATE '2024-01-01' GROUP BY merchant ORDER BY total DESC LIMIT 5"),
    "monthly": ("SELECT date_trunc('month', date) AS month, sum(amount) AS total, count(*) AS n "
                "FROM transactions GROUP BY month ORDER BY month"),
    "trips_international_2024": ("SELECT count(*) FROM trips "
                                 "WHERE international AND year(start_date) = 2024"),
    "trips_by_country": ("SELECT country, count(*) AS n, avg(end_date - start_date) AS days "
                         "FROM trips GROUP BY country ORDER BY n DESC"),
    "refunds_by_currency": ("SELECT currency, count(*) AS n, sum(amount) AS total "
                            "FROM transactions WHERE amount < 0 GROUP BY currency"),
    "business_trip_cost": ("SELECT avg(cost), max(cost), count(*) FROM trips "
                           "WHERE purpose = 'business' AND start_date >= DATE '2023-01-01'"),
    "top10_spend_last_90d": ("SELECT merchant, amount, date FROM transactions "
                             "WHERE date > DATE '2024-12-31' - INTERVAL 90 DAY "
                             "ORDER BY amount DESC LIMIT 10"),
    "rolling_week": ("WITH daily AS (SELECT date, sum(amount) AS spent FROM transactions "
                     "GROUP BY date) SELECT max(week) FROM (SELECT sum(spent) OVER (ORDER BY date "
                     "ROWS BETWEEN 6 PRECEDING AND CURRENT ROW) AS week FROM daily)"),
    "distinct_merchants": ("SELECT count(DISTINCT merchant) FROM transactions "
                           "WHERE category IN ('dining', 'groceries')"),
}


def records(cfg: Config) -> list[Fact]:
    """The queried user's facts (new entities only) and the other users', in event-time order."""
    mine = FactGenerator(cfg.seed + 5, [USER], mix=MIX_QUERY, ops=OpMix(0.0, 0.0, 0.0),
                         start=START, span=SPAN).facts(cfg.query_records)
    others = FactGenerator(cfg.seed + 6, [f"other-{i:03d}" for i in range(cfg.query_other_users)],
                           start=START, span=SPAN).facts(cfg.query_other_users * cfg.query_other_facts)
    return sorted([*mine, *others], key=lambda f: (f.observed_time, f.fact_id))


def build_log(cfg: Config, path: Path) -> None:
    write_log(path, windowed(records(cfg), window_facts=10_000, window_span=timedelta(days=36500)))


def run(cfg: Config) -> list[Figure]:
    """Build the store with a replay, then time the queries (library, then CLI)."""
    from uac import api
    from uac.checkpointer.duckdb_store import DuckDBStateStore
    from uac.settings import Settings

    key = cache_key("query", cfg.seed, cfg.query_records, cfg.query_other_users, cfg.query_other_facts)
    source = cached_log(f"query-{cfg.query_records}", key, lambda p: build_log(cfg, p),
                        use_cache=cfg.use_cache)
    settings = Settings(data_dir=cfg.work / "query")
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    copy_log(source, settings.log_path)
    settle()
    build = timed(lambda: api.replay(settings=settings))
    settle()
    store = DuckDBStateStore(settings.store_path, read_only=True)
    try:
        rows = {t: store.query(USER, f"SELECT count(*) FROM {t}").scalar()
                for t in ("transactions", "trips", "entities")}
        per_query: dict[str, list[float]] = {name: [] for name in QUERIES}
        for name, sql in QUERIES.items():
            for _ in range(2):
                store.query(USER, sql)
            result = store.query(USER, sql)
            assert result.rows, f"query {name} returned no rows"
        settle()
        for _ in range(cfg.query_rounds):
            for name, sql in QUERIES.items():
                per_query[name].append(timed(lambda sql=sql: store.query(USER, sql)))  # type: ignore[misc]
    finally:
        store.close()
    everything = [s for samples in per_query.values() for s in samples]
    cli = _cli(settings.data_dir, cfg.cli_runs)
    detail = {
        "user_rows": rows, "queries": len(QUERIES), "rounds": cfg.query_rounds,
        "store_build_replay_s": round(build, 2),
        "per_query_p50_ms": {n: round(median(s) * 1000, 3) for n, s in per_query.items()},
        "per_query_p95_ms": {n: round(percentile(s, 95) * 1000, 3) for n, s in per_query.items()},
        "sql": QUERIES,
    }
    note = (f"one user with {rows['entities']:,} current entities ({rows['transactions']:,} "
            f"transactions, {rows['trips']:,} trips) among {cfg.query_other_users} other users; "
            f"{len(QUERIES)} aggregate queries x {cfg.query_rounds} rounds through "
            "DuckDBStateStore.query(user, sql) on a read-only store")
    return [
        Figure("query_p50_ms", "aggregate query latency p50 (library)", median(everything) * 1000, "ms",
               len(everything), TARGET_P50_MS, "max", primary=True, detail=detail, note=note),
        Figure("query_p95_ms", "aggregate query latency p95 (library)",
               percentile(everything, 95) * 1000, "ms", len(everything), note=note),
        Figure("query_cli_ms", "aggregate query via `uac query` (new process)",
               median(cli) * 1000 if cli else None, "ms", len(cli),
               detail={"seconds": cli, "sql": QUERIES["by_category"]},
               note="wall time of a `uac query USER --sql ... --json` subprocess: interpreter start, "
                    "imports, opening the store read-only, one query"),
    ]


def _cli(data_dir: Path, runs: int) -> list[float]:
    exe = Path(sys.executable).with_name("uac")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "uac.cli"]
    cmd += ["--data-dir", str(data_dir), "query", USER, "--sql", QUERIES["by_category"], "--json"]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, env=env, timeout=120, check=False)
        out.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"uac query failed: {done.stderr.decode(errors='replace')[-500:]}")
    return out
