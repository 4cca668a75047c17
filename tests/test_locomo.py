"""LoCoMo replay: all 5,882 turns of the ten conversations through extraction, offline model.

Through the real command (``uac ingest --format locomo``, a subprocess) into a real
data dir, twice: no turn is lost or extracted twice, every fact's provenance names
turns of its own user, and the two runs give the same facts with the same ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from uac.domains.facts import Fact
from uac.extraction.locomo import locomo_turns
from uac.streams.log import FileFactLog

LOCOMO_TURNS = 5882


def uac(data_dir: Path, *args: str) -> str:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("UAC_MODEL", None)
    done = subprocess.run([sys.executable, "-m", "uac.cli", "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def facts_of(data_dir: Path) -> list[Fact]:
    with FileFactLog(data_dir / "facts.log", writer=False) as log:
        return [r for _, r in log.read(0) if isinstance(r, Fact)]


def jsonl(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.slow
def test_locomo_replay_loses_nothing_counts_once_and_is_deterministic(tmp_path: Path,
                                                                     locomo_dir: Path) -> None:
    files = sorted(str(p) for p in locomo_dir.glob("*.json"))
    assert len(files) == 10
    turns = [t for f in files for t in locomo_turns(orjson.loads(Path(f).read_bytes()), Path(f).stem)]
    assert len(turns) == LOCOMO_TURNS
    owner = {t.turn_id: t.user_id for t in turns}
    assert len(owner) == LOCOMO_TURNS  # turn ids are unique

    runs = []
    for name in ("first", "second"):
        data = tmp_path / name
        summaries = json.loads(uac(data, "ingest", "--format", "locomo", "--json", *files))
        assert sum(s["extraction"]["turns"] for s in summaries) == LOCOMO_TURNS
        assert sum(s["rejected"] for s in summaries) == 0
        extracted = Counter((r["user"], t) for r in jsonl(data / "turns_extracted.jsonl")
                            for t in r["turns"])  # type: ignore[attr-defined]
        assert set(extracted) == {(u, t) for t, u in owner.items()}  # none lost
        assert set(extracted.values()) == {1}  # none twice
        sent = Counter(t for c in jsonl(data / "model_calls.jsonl") for t in c["turns"])  # type: ignore[attr-defined]
        assert set(sent) == set(owner) and set(sent.values()) == {1}  # each in one model call
        facts = facts_of(data)
        for fact in facts:
            assert fact.provenance and all(owner[p] == fact.user_id for p in fact.provenance)
        runs.append(facts)

    first, second = runs
    assert first, "the offline model found no fact in LoCoMo"
    assert [f.fact_id for f in first] == [f.fact_id for f in second]
    assert first == second
    again = json.loads(uac(tmp_path / "first", "ingest", "--format", "locomo", "--json", *files))
    assert sum(s["extraction"]["turns_already_extracted"] for s in again) == LOCOMO_TURNS
    assert sum(s["appended"] for s in again) == 0
