"""The extraction stage with the offline model over the LoCoMo conversations (5,882 turns).

Every turn of ``../shared/data/locomo/*.json`` goes through the stage as the
pipeline runs it: turns batched per user into windows (the default policy), one
model call per window through litellm (the offline model, registered as a
custom provider), the answer parsed and validated, the facts appended to a real
log file and fsynced. The stage's own time (prompt, parse, validation, append)
is measured apart from the model call; each window's facts are then folded
(untimed) so the next window's manifest sees them. Baseline in the same run: a
window of one turn (one call per turn), for calls and prompt tokens per turn.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.config import Config
from benchmarks.harness import Figure, median, settle
from uac.checkpointer.fold import fold
from uac.checkpointer.state import UserState
from uac.extraction.extractor import Extractor
from uac.extraction.locomo import locomo_turns
from uac.extraction.model import OFFLINE_MODEL, LiteLLMModel
from uac.extraction.turns import Turn
from uac.extraction.windows import TurnWindows, WindowPolicy
from uac.streams.log import FileFactLog

LOCOMO = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"
TARGET_STAGE_MS = 1.0


def load_turns(limit_files: int | None = None) -> list[Turn]:
    import orjson

    files = sorted(LOCOMO.glob("*.json"))[:limit_files]
    if not files:
        raise FileNotFoundError(f"no LoCoMo files in {LOCOMO}")
    return [t for f in files for t in locomo_turns(orjson.loads(f.read_bytes()), f.stem)]


def windows_of(turns: list[Turn], policy: WindowPolicy) -> list[list[Turn]]:
    batcher = TurnWindows(policy)
    out = [w for t in turns for w in batcher.add(t)]
    return out + batcher.flush()


def one_pass(windows: list[list[Turn]], work: Path) -> dict[str, float]:
    """Extract, append and fold every window once; the stage's and the model's seconds."""
    extractor = Extractor(LiteLLMModel(OFFLINE_MODEL))
    states: dict[str, UserState] = {}
    stage = model = 0.0
    calls = prompt = facts = 0
    path = work / "facts.log"
    path.unlink(missing_ok=True)
    started = time.perf_counter()
    with FileFactLog(path) as log:
        for window in windows:
            result = extractor.extract(window, states.get(window[0].user_id))
            t0 = time.perf_counter()
            if result.facts:
                log.append(result.facts)
                log.flush()
            stage += result.stage_seconds + time.perf_counter() - t0
            if result.call is not None:
                model += result.call.seconds
                calls += result.call.calls
                prompt += result.call.prompt_tokens
            facts += len(result.facts)
            fold(result.facts, states)
    total = time.perf_counter() - started
    return {"stage": stage, "model": model, "total": total, "calls": calls, "prompt": prompt,
            "facts": facts}


def run(cfg: Config) -> list[Figure]:
    """Stage ms per turn (target), turns/s, calls and prompt tokens per turn vs one call a turn."""
    turns = load_turns(2 if cfg.quick else None)
    n = len(turns)
    work = cfg.work / "extract"
    work.mkdir(parents=True, exist_ok=True)
    windows = windows_of(turns, WindowPolicy())
    one_pass(windows[:20], work)  # warm-up: litellm import, the offline provider, caches
    repeats = 2 if cfg.quick else 3
    passes = []
    for _ in range(repeats):
        settle()
        passes.append(one_pass(windows, work))
    stage_ms = [1000 * p["stage"] / n for p in passes]
    model_ms = [1000 * p["model"] / n for p in passes]
    totals = [p["total"] for p in passes]
    last = passes[-1]
    base_turns = load_turns(1)
    base = one_pass(windows_of(base_turns, WindowPolicy(turns=1)), work)
    mine = one_pass(windows_of(base_turns, WindowPolicy()), work)
    share = [p["stage"] / (p["stage"] + p["model"]) for p in passes]
    what = (f"{n:,} LoCoMo turns, {len(windows)} windows (default policy), offline model "
            f"via litellm, facts appended to a log file and fsynced per window")
    return [
        Figure("extract_stage_ms_per_turn", "extraction stage time per turn beyond the model call",
               median(stage_ms), "ms", repeats, TARGET_STAGE_MS, "max", primary=True,
               detail={"turns": n, "windows": len(windows), "facts": last["facts"],
                       "stage_ms_per_turn": stage_ms},
               note=f"{what}; prompt building, answer parsing, validation, log append + fsync; "
                    "median of repeats"),
        Figure("extract_model_ms_per_turn", "offline model call time per turn (litellm included)",
               median(model_ms), "ms", repeats, detail={"model_ms_per_turn": model_ms},
               note="time inside ChatModel.complete: litellm's call path and the offline rules"),
        Figure("extract_turns_per_s", "extraction throughput, offline model", n / median(totals),
               "turns/s", repeats, note=f"{what}; wall time including the untimed-stage fold"),
        Figure("extract_outside_model_share", "share of extraction time outside the model call",
               100 * median(share), "%", repeats, note="stage / (stage + model call)"),
        Figure("extract_calls_per_turn", "model calls per turn, default window",
               last["calls"] / n, "calls", 1,
               detail={"one_turn_windows_calls_per_turn": base["calls"] / len(base_turns)},
               note=f"baseline, one call per turn: {base['calls'] / len(base_turns):.2f}"),
        Figure("extract_prompt_tokens_per_turn", "prompt tokens per turn, default window",
               last["prompt"] / n, "tokens", 1,
               detail={"baseline_one_turn_windows": base["prompt"] / len(base_turns),
                       "default_on_baseline_file": mine["prompt"] / len(base_turns),
                       "baseline_file_turns": len(base_turns)},
               note=(f"the offline model counts ~4 characters a token; baseline (one call per "
                     f"turn, first LoCoMo file): {base['prompt'] / len(base_turns):,.0f} tokens/turn "
                     f"vs {mine['prompt'] / len(base_turns):,.0f} with default windows")),
    ]
