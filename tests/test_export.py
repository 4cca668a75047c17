"""`uac export`: a user's memory as a self-contained Python project, run for real.

A real embedded pipeline ingests observations; the exported project is then run
with a separate Python process whose ``import uac`` is blocked, with pytest and
with its runner, and compared with what the store says.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from uac import api
from uac.cli import main
from uac.errors import ExportError
from uac.executor.alerts import AlertStatus
from uac.export import directory_names, export_all, export_user
from uac.settings import Settings

TRICKY_USER = "o'brien\"\n'''\"\"\" import os #"
EXAMPLE = Path(api.__file__).parent / "examples" / "demo.jsonl"
HOSTILE_VALUE = "\"\"\"\nprint('PWN' + 'ED')\n'''\\"


def _obs(user: str, etype: str, attrs: dict[str, Any], day: str, source: str,
         **more: Any) -> dict[str, Any]:
    return {"user": user, "type": etype, "attributes": attrs, "valid_time": day,
            "observed_time": f"{day}T10:00:00Z", "source_id": source, **more}


OBSERVATIONS = [
    _obs("alice", "allergy", {"substance": "penicillin", "reaction": "hives"}, "2025-01-10",
         "clinic-1"),
    _obs("alice", "passport", {"country": "US", "expiry_date": "2025-09-01"}, "2025-02-01",
         "scan-1"),
    _obs("alice", "trip", {"destination": "Lisbon", "country": "PT", "start_date": "2025-07-01",
                           "end_date": "2025-07-10", "international": True}, "2025-03-01",
         "booking-1"),
    _obs("alice", "pet", {"name": "Rex", "species": "dog", "tags": ["good", "boy"]},
         "2025-03-05", "chat-pet"),
    _obs("alice", "event", {"title": "dentist", "start": "2025-06-20T09:00:00Z",
                            "end": "2025-06-20T10:00:00Z"}, "2025-04-01", "cal-1"),
    _obs("alice", "event", {"title": "standup", "start": "2025-06-20T09:30:00Z"}, "2025-04-02",
         "cal-2"),
    _obs("alice", "contact", {"name": "Sam", "phone": "555"}, "2025-04-03", "chat-sam"),
    _obs("alice", "contact", {"name": "Sam"}, "2025-04-04", "chat-sam-gone", op="retract"),
    _obs("alice", "deadline", {"title": "tax return", "due": "2025-06-05"}, "2025-05-20",
         "chat-tax"),
    _obs("alice", "medication", {"name": "amoxicillin", "prescribed_on": "2025-06-01",
                                 "notes": "take with food"}, "2025-06-01", "pharmacy-1"),
    _obs("alice", "preference", {"topic": "seat", "value": HOSTILE_VALUE}, "2025-06-01",
         "chat-seat", id="seat'\"\n''' x"),
    _obs("../x", "allergy", {"substance": "latex"}, "2025-05-01", "evil-1"),
    _obs("a/b", "allergy", {"substance": "nuts"}, "2025-05-01", "evil-2"),
    _obs("a_b", "allergy", {"substance": "eggs"}, "2025-05-01", "plain-1"),
    _obs(TRICKY_USER, "medication", {"name": "ibuprofen", "drug_class": "nsaid"}, "2025-05-02",
         "tricky-1"),
    _obs(TRICKY_USER, "allergy", {"substance": "aspirin"}, "2025-05-02", "tricky-2"),
]
WATERMARK = "2025-06-01T10:00:00Z"


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("export-memory")
    path = root / "observations.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in OBSERVATIONS), encoding="utf-8")
    settings = Settings(data_dir=root / "data")
    summary = api.ingest(path, settings=settings)
    assert summary.rejected == 0, summary.errors
    return settings


@pytest.fixture(scope="module")
def blocker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PYTHONPATH entry whose ``uac`` package refuses to import."""
    root = tmp_path_factory.mktemp("blocker")
    (root / "uac").mkdir()
    (root / "uac" / "__init__.py").write_text(
        "raise ImportError('an exported project must not import uac')\n")
    return root


def run_py(cwd: Path, blocker: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the project's Python with ``import uac`` blocked and no project on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONPATH=str(blocker), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def open_pairs(user: str, settings: Settings) -> set[tuple[str, str]]:
    return {(a.rule_id, a.subject)
            for a in api.alerts(user, settings=settings, status=AlertStatus.OPEN)}


def runner_alerts(project: Path, blocker: Path) -> list[dict[str, str]]:
    """The runner's alerts (--json), after checking its plain output says the same."""
    plain = run_py(project, blocker, "runner.py")
    assert plain.returncode == 0, plain.stderr
    as_json = run_py(project, blocker, "runner.py", "--json")
    assert as_json.returncode == 0, as_json.stderr
    found: list[dict[str, str]] = json.loads(as_json.stdout)
    assert plain.stdout.splitlines() == [
        f"{a['severity']} {a['rule_id']}: {a['message']}" for a in found]
    assert [a["subject"] for a in found] == sorted(a["subject"] for a in found)
    return found


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


# -- the exported project runs on its own ----------------------------------------------------------


def test_the_blocker_really_blocks_uac(tmp_path: Path, blocker: Path) -> None:
    result = run_py(tmp_path, blocker, "-c", "import uac")
    assert result.returncode != 0 and "must not import uac" in result.stderr


def test_exported_project_passes_its_own_tests(memory: Settings, blocker: Path,
                                               tmp_path: Path) -> None:
    summary = export_user("alice", tmp_path / "alice", settings=memory)
    assert summary.matches_store and not summary.rule_failures
    result = run_py(tmp_path / "alice", blocker, "-m", "pytest", "-q", "-W", "error")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{2 + summary.rules} passed" in result.stdout


def test_runner_prints_the_open_alerts_of_the_store(memory: Settings, blocker: Path,
                                                    tmp_path: Path) -> None:
    export_user("alice", tmp_path / "alice", settings=memory)
    found = runner_alerts(tmp_path / "alice", blocker)
    expected = open_pairs("alice", memory)
    assert {(a["rule_id"], a["subject"]) for a in found} == expected
    assert ("drug_allergy", "medication/amoxicillin|allergy/penicillin") in expected
    assert {"deadline_approaching", "passport_validity", "overlapping_commitments"} <= {
        rule for rule, _ in expected}


def test_runner_matches_the_store_on_the_bundled_demo(tmp_path: Path, blocker: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    api.ingest(EXAMPLE, settings=settings)
    summary = export_user("maya", tmp_path / "maya", settings=settings)
    assert summary.matches_store and summary.open_alerts >= 3
    found = runner_alerts(tmp_path / "maya", blocker)
    assert {(a["rule_id"], a["subject"]) for a in found} == open_pairs("maya", settings)
    result = run_py(tmp_path / "maya", blocker, "-m", "pytest", "-q", "-W", "error")
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_files_never_import_uac(memory: Settings, tmp_path: Path) -> None:
    summary = export_user("alice", tmp_path / "p", settings=memory)
    python = [f for f in summary.files if f.endswith(".py")]
    assert {"manifest.py", "runner.py", "domains/__init__.py", "domains/health.py",
            "constraints/__init__.py", "constraints/_runtime.py",
            "tests/test_constraints.py"} <= set(python)
    for name in python:
        source = (tmp_path / "p" / name).read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "uac" for a in node.names), name
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert (node.module or "").split(".")[0] != "uac", name
        assert not any(line.lstrip().startswith(("from uac", "import uac"))
                       for line in source.splitlines()), name


def test_state_round_trips_exactly(memory: Settings, blocker: Path, tmp_path: Path) -> None:
    """Every entity comes back with the same attributes, fact ids and sources (EXTRA included)."""
    export_user("alice", tmp_path / "p", settings=memory)
    dump = ("import json, manifest\nfrom constraints import load_state\n"
            "s = load_state()\nprint(json.dumps({'user': manifest.USER_ID, 'at': "
            "manifest.EXPORTED_AT.isoformat(), 'views': [[v.entity_type, v.entity_id, "
            "v.attributes, list(v.fact_ids), list(v.sources), type(v.model).__name__] "
            "for v in s.current()]}))")
    result = run_py(tmp_path / "p", blocker, "-c", dump)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    state = api.user_state("alice", settings=memory)
    assert got["user"] == "alice"
    assert got["at"] == WATERMARK.replace("Z", "+00:00")  # the store's event time
    assert got["views"] == [[v.entity_type, v.entity_id, v.attributes, list(v.fact_ids),
                             list(v.sources), type(v.model).__name__] for v in state.current()]
    kinds = {(t, m) for t, _, _, _, _, m in got["views"]}
    assert ("entity", "GenericEntity") in kinds and ("medication", "Medication") in kinds
    assert not any(t == "contact" for t, *_ in got["views"])  # retracted


def test_export_is_byte_for_byte_deterministic(memory: Settings, tmp_path: Path) -> None:
    export_user("alice", tmp_path / "one", settings=memory)
    export_user("alice", tmp_path / "two", settings=memory)
    first, second = tree(tmp_path / "one"), tree(tmp_path / "two")
    assert first == second and len(first) > 10


# -- safety ----------------------------------------------------------------------------------------


def test_refuses_a_non_empty_directory_unless_forced(memory: Settings, tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        export_user("alice", target, settings=memory)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    export_user("alice", target, settings=memory, force=True)
    assert (target / "keep.txt").read_text() == "mine" and (target / "manifest.py").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="not a directory"):
        export_user("alice", tmp_path / "file", settings=memory, force=True)


def test_unknown_user_is_a_clear_error(memory: Settings, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="unknown user 'nobody'"):
        export_user("nobody", tmp_path / "n", settings=memory)
    assert not (tmp_path / "n").exists()


def test_untrusted_strings_stay_data(memory: Settings, blocker: Path, tmp_path: Path) -> None:
    export_user(TRICKY_USER, tmp_path / "t", settings=memory)
    export_user("alice", tmp_path / "a", settings=memory)
    probe = ("import json, manifest, domains\nprint(json.dumps([manifest.USER_ID, "
             "[[i, m.value] for i, m in domains.STATE['preference'].items()]]))")
    tricky = run_py(tmp_path / "t", blocker, "-c", probe)
    assert tricky.returncode == 0, tricky.stderr
    assert json.loads(tricky.stdout)[0] == TRICKY_USER
    alice = run_py(tmp_path / "a", blocker, "-c", probe)
    assert json.loads(alice.stdout)[1] == [["seat'\"\n''' x", HOSTILE_VALUE]]
    assert "PWNED" not in alice.stdout + alice.stderr
    tests = run_py(tmp_path / "t", blocker, "-m", "pytest", "-q", "-W", "error")
    assert tests.returncode == 0, tests.stdout + tests.stderr


def test_export_all_keeps_every_user_inside_the_directory(memory: Settings,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "all"
    ticks: list[int] = []
    summaries = export_all(out, settings=memory, progress=ticks.append)
    users = api.users(settings=memory)
    assert sorted(s.user_id for s in summaries) == sorted(users) and sum(ticks) == len(users)
    index = json.loads((out / "users.json").read_text())
    names = {row["user_id"]: row["directory"] for row in index}
    assert names == directory_names(users)
    for user, name in names.items():
        assert "/" not in name and not name.startswith(".") and (out / name).is_dir(), user
        assert (out / name / "manifest.py").exists()
    assert names["alice"] == "alice" and names["a_b"] == "a_b"
    assert names["a/b"] != names["a_b"] and names["../x"].startswith("x-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all"]  # nothing escaped
    with pytest.raises(ExportError, match="not empty"):
        export_all(out, settings=memory)


def test_directory_names_are_unique_ignoring_case() -> None:
    names = directory_names(["Alice", "alice", "..", ".", "", "users.json", "a b"])
    assert len({n.lower() for n in names.values()}) == 7
    assert all(n and "/" not in n and not n.startswith(".") for n in names.values())
    assert names["users.json"] != "users.json"


# -- the command -----------------------------------------------------------------------------------


def test_cli_export(memory: Settings, tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--data-dir", str(memory.data_dir), "export"]
    out = tmp_path / "cli"
    result = runner.invoke(main, [*base, "alice", str(out)])
    assert result.exit_code == 0, result.output
    assert "exported alice" in result.output and (out / "runner.py").exists()
    again = runner.invoke(main, [*base, "alice", str(out)])
    assert again.exit_code == 1 and "not empty" in again.output
    forced = runner.invoke(main, [*base, "--force", "--json", "alice", str(out)])
    assert forced.exit_code == 0, forced.output
    data = json.loads(forced.output)
    assert data["user_id"] == "alice" and data["matches_store"] is True
    assert data["exported_at"] == WATERMARK
    every = runner.invoke(main, [*base, "--all", "--json", str(tmp_path / "every")])
    assert every.exit_code == 0, every.output
    assert len(json.loads(every.output)) == len(api.users(settings=memory))
    for wrong in (["alice"], ["--all", "alice", str(out)]):
        bad = runner.invoke(main, [*base, *wrong])
        assert bad.exit_code == 2 and "expected" in bad.output
    missing = runner.invoke(main, [*base, "nobody", str(tmp_path / "nobody")])
    assert missing.exit_code == 1 and "unknown user" in missing.output


# -- the vendored runtime keeps up with uac --------------------------------------------------------


def test_runtime_mirrors_the_rule_api_the_rules_use() -> None:
    """constraints/_runtime.py re-implements uac's rule API: a new keyword or field in
    uac.executor.rules must be mirrored in uac.export.runtime, or exports break."""
    import dataclasses
    import inspect

    from uac.checkpointer import state as uac_state
    from uac.executor import rules as uac_rules
    from uac.export import runtime

    def params(fn: Any) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert params(runtime.rule) == params(uac_rules.rule)
    for ours, theirs in ((runtime.Rule, uac_rules.Rule), (runtime.Finding, uac_rules.Finding),
                         (runtime.RuleContext, uac_rules.RuleContext),
                         (runtime.EntityView, uac_state.EntityView)):
        assert [f.name for f in dataclasses.fields(ours)] == [
            f.name for f in dataclasses.fields(theirs)], ours
        public = {n for n in dir(theirs) if not n.startswith("_")}
        assert public <= set(dir(ours)), (ours, public - set(dir(ours)))
    assert list(runtime.Severity) == [runtime.Severity(s.value) for s in uac_rules.Severity]
    for method in ("entity", "of_type", "current"):
        assert hasattr(runtime.State, method) and hasattr(uac_state.UserState, method)
