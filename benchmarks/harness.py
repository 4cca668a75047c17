"""Timing helpers, figures with targets, the printed table and the results file."""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Goal = Literal["min", "max"]
"""``min``: the value must be at least the target; ``max``: at most the target."""


@dataclass(slots=True)
class Figure:
    """One measured number, with its target (if the issue sets one) and how it was obtained."""

    key: str
    label: str
    value: float | None
    unit: str
    repeats: int = 1
    target: float | None = None
    goal: Goal | None = None
    primary: bool = False
    """One of the figures the issue sets a target for (the others are context or diagnosis)."""
    detail: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    display: str | None = None
    """What the table shows instead of the value (e.g. for a run that was stopped)."""

    @property
    def passed(self) -> bool | None:
        """True/False against the target; None when there is no target."""
        if self.target is None or self.goal is None:
            return None
        if self.value is None:
            return False
        return self.value >= self.target if self.goal == "min" else self.value <= self.target

    def target_text(self) -> str:
        if self.target is None or self.goal is None:
            return ""
        sign = ">=" if self.goal == "min" else "<="
        return f"{sign} {_number(self.target)} {self.unit}".rstrip()

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.value is not None:
            data["value"] = float(f"{self.value:.6g}")
        data["passed"] = self.passed
        if self.display is None:
            del data["display"]
        return data


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def settle() -> None:
    """Collect garbage between phases so one phase's leftovers do not bill the next."""
    gc.collect()
    gc.collect()


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes (perf_counter)."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def repeat(fn: Callable[[], Any], *, repeats: int, warmup: int = 1,
           setup: Callable[[], Any] | None = None) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones.

    ``setup`` (untimed) runs before every call, warm-ups included; garbage is
    collected before each timed call.
    """
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    out = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        settle()
        out.append(timed(fn))
    return out


def cpu_counters() -> tuple[int, int] | None:
    """(total, steal) jiffies of all CPUs from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Share (0-100) of CPU time the hypervisor took away between two counter readings.

    On a shared VM, stolen time slows every figure down; a run with much steal is noisy.
    """
    if before is None or after is None or after[0] <= before[0]:
        return None
    return round(100 * (after[1] - before[1]) / (after[0] - before[0]), 1)


def machine_info() -> dict[str, Any]:
    """Where the figures come from."""
    import duckdb
    import orjson
    import pyarrow

    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "duckdb": duckdb.__version__,
        "pyarrow": pyarrow.__version__,
        "orjson": orjson.__version__,
    }
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as fh:
            total_kib = int(fh.readline().split()[1])
        info["memory_gib"] = round(total_kib / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        from importlib.metadata import version

        info["uac"] = version("uac")
    except Exception:  # pragma: no cover - not installed as a distribution
        info["uac"] = None
    return info


def render_table(figures: list[Figure]) -> str:
    """A plain-text table: figure, value, target, pass/fail, repeats."""
    header = ("figure", "value", "target", "result", "n")
    rows = []
    for fig in figures:
        verdict = {True: "PASS", False: "FAIL", None: ""}[fig.passed]
        value = fig.display or ("-" if fig.value is None else f"{_number(fig.value)} {fig.unit}")
        rows.append((("* " if fig.primary else "  ") + fig.label, value, fig.target_text(),
                     verdict, str(fig.repeats)))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i != 1 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    return "\n".join(lines)
