"""The `uac` command in real subprocesses: every command, --json output, exit codes,
a reader while a writer runs, and a writer killed mid-ingest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from uac import api
from uac.errors import StoreBusyError
from uac.settings import Settings

COMMANDS = ["ingest", "tick", "state", "facts", "alerts", "query", "replay", "export", "users",
            "rejects", "rules", "catalog", "demo"]


def uac(data_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "uac.cli", "--data-dir", str(data_dir), *args],
                            capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"uac {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return orjson.loads(result.stdout)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(tmp_path: Path, command: str) -> None:
    result = uac(tmp_path, command, "--help")
    assert "Usage: " in result.stdout and len(result.stdout.splitlines()) > 4


def test_the_whole_flow_through_the_command(tmp_path: Path, demo_path: Path) -> None:
    data = tmp_path / "mem"
    [summary] = as_json(uac(data, "ingest", str(demo_path), "--json"))
    assert (summary["appended"], summary["rejected"]) == (16, 0)
    state = as_json(uac(data, "state", "maya", "--json"))
    assert {"passport", "medication", "allergy"} <= {e["entity_type"] for e in state}
    facts = as_json(uac(data, "facts", "maya", "--json"))
    assert {f["status"] for f in facts} >= {"current", "superseded"}
    assert all(f["provenance"] for f in facts)
    open_alerts = as_json(uac(data, "alerts", "maya", "--status", "open", "--json"))
    drug = next(a for a in open_alerts if a["rule_id"] == "drug_allergy")
    assert drug["evidence"]["sources"] == ["clinic-intake-2025-01-15", "pharmacy-rx-7781"]
    history = as_json(uac(data, "alerts", "maya", "--history", "--json"))
    passport = [e["kind"] for e in history if e["alert"]["rule_id"] == "passport_validity"]
    assert passport == ["raised", "resolved"]
    answer = as_json(uac(data, "query", "maya", "--sql",
                         "SELECT round(sum(amount), 2) AS spent FROM transactions "
                         "WHERE category = 'dining'", "--json"))
    assert answer == {"columns": ["spent"], "rows": [[325.0]]}
    assert as_json(uac(data, "users", "--json")) == ["maya"]
    assert "replay matches" in uac(data, "replay", "--check").stdout
    human = uac(data, "alerts", "maya").stdout
    assert "[OPEN] CRITICAL drug_allergy" in human and "sources: clinic-intake" in human


def test_errors_are_one_clear_line_and_a_status(tmp_path: Path) -> None:
    missing = uac(tmp_path / "mem", "ingest", str(tmp_path / "nope.jsonl"), check=False)
    assert missing.returncode != 0 and "nope.jsonl" in missing.stderr
    empty = uac(tmp_path / "none", "state", "maya", check=False)
    assert empty.returncode == 1 and "uac ingest" in empty.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "x"}\n')
    metrics = tmp_path / "uac.prom"
    strict = uac(tmp_path / "mem", "ingest", str(bad), "--strict", "--metrics-file", str(metrics),
                 check=False)
    assert strict.returncode == 3 and "bad.jsonl:1" in strict.stderr
    assert 'uac_rejects_total{step_id="ingest.parse"} 1.0' in metrics.read_text()
    refused = uac(tmp_path / "mem", "query", "x", "--sql", "DROP TABLE trips", check=False)
    assert refused.returncode == 1 and "only read-only SELECT" in refused.stderr


def write_history(path: Path, lines: int, users: int = 20) -> None:
    with open(path, "wb") as fh:
        for n in range(lines):
            day = 1 + (n * 27) // lines
            fh.write(orjson.dumps({
                "user": f"user{n % users}", "type": "transaction",
                "attributes": {"amount": n % 97 + 0.5, "date": f"2025-03-{day:02d}",
                               "category": ["food", "rent", "travel"][n % 3]},
                "valid_time": f"2025-03-{day:02d}T{n % 24:02d}:00:00Z", "source_id": f"tx-{n}",
            }) + b"\n")


def count_facts(settings: Settings) -> int:
    return sum(int(api.query(u, "SELECT count(*) FROM transactions", settings=settings).scalar())
               for u in api.users(settings=settings))


@pytest.mark.slow
def test_reading_while_another_process_ingests(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    write_history(history, 30_000)
    settings = Settings(data_dir=tmp_path / "mem", lock_timeout=60)
    writer = subprocess.Popen([sys.executable, "-m", "uac.cli", "--data-dir", str(settings.data_dir),
                               "ingest", str(history), "--window-facts", "500"])
    seen: list[int] = []
    busy = 0
    try:
        deadline = time.monotonic() + 300
        while writer.poll() is None and time.monotonic() < deadline:
            if not settings.store_path.exists():
                time.sleep(0.05)
                continue
            try:
                seen.append(count_facts(settings))
            except StoreBusyError:
                busy += 1
    finally:
        writer.wait(timeout=300)
    assert writer.returncode == 0
    assert seen, "no read succeeded while the ingest ran"
    assert seen == sorted(seen)  # readers see committed prefixes only, never going back
    assert count_facts(settings) == 30_000
    assert busy == 0  # with --wait long enough, a reader waits instead of failing


@pytest.mark.slow
def test_a_writer_killed_mid_ingest_loses_nothing(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    write_history(history, 20_000)
    clean = Settings(data_dir=tmp_path / "clean")
    api.ingest(history, settings=clean)
    crashed = Settings(data_dir=tmp_path / "crashed")
    for kill_after in (0.3, 1.5):  # kill it twice, at different points
        writer = subprocess.Popen([sys.executable, "-m", "uac.cli", "--data-dir",
                                   str(crashed.data_dir), "ingest", str(history)])
        deadline = time.monotonic() + 60
        while not crashed.log_path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(kill_after)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    api.ingest(history, settings=crashed)  # the restart completes the work
    assert count_facts(crashed) == count_facts(clean) == 20_000
    for user in api.users(settings=clean):
        assert api.state(user, settings=crashed) == api.state(user, settings=clean)
    assert api.replay(settings=crashed, check=True).matches
