"""Sizes and repeat counts of a benchmark run (full, or ``--quick`` for development)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Config:
    """Everything a benchmark needs to know about the run it is part of."""

    quick: bool
    work: Path
    """A scratch directory for data dirs and stores (removed at the end)."""
    seed: int = 20240101
    use_cache: bool = True

    # fold throughput
    fold_facts: int = 100_000
    fold_users: int = 1000
    fold_repeats: int = 5

    # replay
    replay_facts: int = 1_000_000
    replay_users: int = 1000
    replay_days: int = 365
    replay_timeout: float = 300.0

    # checkpoint cost of one new fact
    history_small: int = 1_000
    history_mid: int = 10_000
    history_large: int = 100_000
    history_users_many: int = 100
    one_user_facts_per_day: int = 200
    new_facts: int = 40
    new_facts_warmup: int = 5
    baseline_repeats: int = 3

    # aggregate queries
    query_records: int = 100_000
    query_other_users: int = 20
    query_other_facts: int = 2_000
    query_rounds: int = 30
    cli_runs: int = 3

    # Kafka: worker end to end vs a passthrough, turn -> alert latency
    kafka_users: int = 250
    kafka_sessions: int = 8
    kafka_repeats: int = 3
    kafka_latency_samples: int = 150
    kafka_latency_interval: float = 0.1

    @classmethod
    def make(cls, *, quick: bool, work: Path, use_cache: bool = True,
             replay_timeout: float | None = None, replay_facts: int | None = None) -> Config:
        """The full configuration, or the quick one (same shape, smaller sizes)."""
        if quick:
            cfg = cls(quick=True, work=work, use_cache=use_cache, fold_facts=20_000, fold_repeats=3,
                      replay_facts=100_000, replay_users=1000, replay_days=37,
                      replay_timeout=120.0, history_small=1_000, history_mid=5_000,
                      history_large=20_000, new_facts=15, new_facts_warmup=3,
                      baseline_repeats=1, query_records=20_000, query_other_users=5,
                      query_other_facts=1_000, query_rounds=10, cli_runs=1, kafka_users=150,
                      kafka_sessions=6, kafka_repeats=1, kafka_latency_samples=50)
        else:
            cfg = cls(quick=False, work=work, use_cache=use_cache)
        changes: dict[str, object] = {}
        if replay_timeout is not None:
            changes["replay_timeout"] = replay_timeout
        if replay_facts is not None:
            changes["replay_facts"] = replay_facts
        if changes:
            from dataclasses import replace

            cfg = replace(cfg, **changes)  # type: ignore[arg-type]
        return cfg
