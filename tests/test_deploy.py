"""The Kafka mode's deployment files, validated without Docker.

- docker-compose.yml against the Compose Specification schema (the copy check-jsonschema vendors),
  plus what the schema cannot see: dependencies, healthchecks, ports, mounts, env names, commands;
- the Dockerfile and .dockerignore (what the build copies exists and is not ignored);
- Prometheus config and rules with promtool (check + unit tests of every alert), skipped without it;
- the Grafana dashboard and provisioning: datasource uid, and every metric a query or rule reads is
  one uac exports.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest

from uac.metrics import Metrics
from uac.settings import Settings

yaml = pytest.importorskip("yaml", reason="PyYAML is a dev dependency (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
PROM_DIR = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "dashboards" / "uac.json"
PROVISIONING = ROOT / "dashboards" / "provisioning"
WORKERS = ("worker-1", "worker-2")

# Environment variables read by `uac worker`'s options (not Settings fields), and one the worker
# does not read yet (it uses the local registry built from schemas/).
PENDING_SETTINGS = {"UAC_SCHEMA_REGISTRY_URL", "UAC_WORKER_PORT", "UAC_WORKER_BIND", "UAC_WORKER_ID",
                    "UAC_WORKER_CHECKPOINT"}
PENDING_COMMANDS: set[tuple[str, ...]] = set()


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses duplicate keys (PyYAML keeps the last one; Compose refuses them)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(k, deep=True) for k, _ in node.value
                if k.tag != "tag:yaml.org,2002:merge"]
        duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
        if duplicates:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {duplicates}",
                                                    node.start_mark)
        return super().construct_mapping(node, deep)  # type: ignore[no-any-return]


def _yaml(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)  # a SafeLoader subclass


def test_the_yaml_loader_refuses_duplicate_keys() -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate keys"):
        yaml.load("a: 1\nb: 2\na: 3\n", Loader=_StrictLoader)
    assert yaml.load("x: &x {a: 1}\ny: {<<: *x, a: 2}\n", Loader=_StrictLoader)["y"] == {"a": 2}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _yaml(COMPOSE)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the ["NAME=value", ...] form
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def _uac_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services running the image built from this repo's Dockerfile."""
    return {name: s for name, s in services.items() if "build" in s}


# --- Compose Specification schema --------------------------------------------------------------


@pytest.fixture(scope="module")
def compose_validator() -> Any:
    # Located, not imported: importing check_jsonschema loads its CLI, which needs a newer click than
    # some releases declare; the schema file is all we need.
    spec = importlib.util.find_spec("check_jsonschema")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("check-jsonschema is a dev dependency (it vendors the Compose schema)")
    import jsonschema

    vendored = Path(spec.submodule_search_locations[0]) / "builtin_schemas" / "vendor" / "compose-spec.json"
    schema = json.loads(vendored.read_text(encoding="utf-8"))
    # Some vendored copies spell draft 7 as "https://json-schema.org/draft-07/schema", an id
    # jsonschema does not know: fall back to draft 7 for those (newer copies say 2020-12).
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _errors(validator: Any, doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_file_matches_the_compose_specification(compose_validator: Any,
                                                        compose: dict[str, Any]) -> None:
    assert _errors(compose_validator, compose) == []


def _bad_condition(doc: dict[str, Any]) -> None:
    doc["services"]["worker-1"]["depends_on"]["kafka"]["condition"] = "service_ready"


def _misspelled_key(doc: dict[str, Any]) -> None:
    doc["services"]["kafka"]["helthcheck"] = doc["services"]["kafka"].pop("healthcheck")


def _volumes_not_a_list(doc: dict[str, Any]) -> None:
    doc["services"]["kafka"]["volumes"] = "kafka-data:/var/lib/kafka/data"


@pytest.mark.parametrize("breakage", [_bad_condition, _misspelled_key, _volumes_not_a_list])
def test_the_schema_check_rejects_a_broken_copy(compose_validator: Any, compose: dict[str, Any],
                                                breakage: Any) -> None:
    broken = copy.deepcopy(compose)
    breakage(broken)
    assert _errors(compose_validator, broken), f"{breakage.__name__} was accepted"


# --- what the schema cannot see ---------------------------------------------------------------


def test_the_stack_has_the_expected_services(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"kafka", "schema-registry", "topics", *WORKERS, "prometheus", "grafana"}
    assert services["kafka"]["image"] == "apache/kafka:4.1.0"
    assert _env(services["kafka"])["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert services["topics"]["command"] == ["uac", "topics", "create"]
    assert services["topics"]["restart"] == "no"


def test_dependencies_exist_and_their_conditions_can_be_met(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for dep, condition in _depends_on(service).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            target = services[dep]
            if condition == "service_healthy":
                assert target.get("healthcheck", {}).get("test"), f"{name} waits for {dep}'s health, " \
                                                                  f"which has no healthcheck"
                assert not target["healthcheck"].get("disable")
            if condition == "service_completed_successfully":
                assert target.get("restart", "no") == "no", f"{dep} is one-shot: it must not restart"
    for worker in WORKERS:
        assert _depends_on(services[worker]) == {"kafka": "service_healthy",
                                                 "schema-registry": "service_healthy",
                                                 "topics": "service_completed_successfully"}


def _host_ports(service: dict[str, Any]) -> list[tuple[str, int]]:
    """(host port, container port) pairs of the short ("[ip:]host:container") and long forms."""
    pairs = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            if "published" in port:
                pairs.append((str(port["published"]), int(port["target"])))
            continue
        parts = str(port).split("/")[0].split(":")
        if len(parts) >= 2:
            pairs.append((parts[-2], int(parts[-1])))
    return pairs


def test_host_ports_do_not_clash_and_match_the_workers(services: dict[str, dict[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for name, service in services.items():
        for host, _ in _host_ports(service):
            assert host not in seen, f"host port {host} of {name} is already taken by {seen[host]}"
            seen[host] = name
    assert [_host_ports(services[w])[0][0] for w in WORKERS] == ["6066", "6067"]
    for worker in WORKERS:
        port = int(_env(services[worker])["UAC_WORKER_PORT"])
        assert [c for _, c in _host_ports(services[worker])] == [port]
        assert f"localhost:{port}/health" in " ".join(services[worker]["healthcheck"]["test"])


def test_mounts_and_build_contexts_exist(compose: dict[str, Any],
                                         services: dict[str, dict[str, Any]]) -> None:
    named = set(compose.get("volumes") or {})
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else str(volume).split(":")[0]
            if source.startswith((".", "/")):
                assert (ROOT / source).resolve().exists(), f"{name} mounts missing {source}"
                assert (ROOT / source).resolve().is_relative_to(ROOT), f"{name} mounts {source}"
            else:
                assert source in named, f"{name} uses undeclared volume {source}"
        if "build" in service:
            build = service["build"]
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            assert (context / dockerfile).is_file(), f"{name} builds from a missing {dockerfile}"
    for worker in WORKERS:
        assert _env(services[worker]).get("UAC_DATA_DIR") == "/data", f"{worker} keeps its data off /data"
    data_volumes = [str(v).split(":")[0] for w in WORKERS for v in services[w]["volumes"]]
    assert len(set(data_volumes)) == len(WORKERS), "each worker needs its own data volume"


def test_uac_environment_names_are_settings(services: dict[str, dict[str, Any]]) -> None:
    known = {f"UAC_{field.upper()}" for field in Settings.model_fields} | PENDING_SETTINGS
    uac = _uac_services(services)
    assert set(uac) == {"topics", *WORKERS}
    for name, service in uac.items():
        unknown = set(_env(service)) - known
        assert not unknown, f"{name} sets {sorted(unknown)}, which uac.settings.Settings does not read"
    worker_env = _env(services["worker-1"])
    for passthrough in ("UAC_MODEL", "UAC_API_BASE", "UAC_API_KEY"):
        assert worker_env[passthrough] == f"${{{passthrough}:-}}"


def test_compose_commands_are_uac_commands(services: dict[str, dict[str, Any]]) -> None:
    from uac.cli import main

    for name, service in _uac_services(services).items():
        program, *words = service["command"]
        assert program == "uac"
        group: click.Command = main
        for i, word in enumerate(words):
            if tuple(words[: i + 1]) in PENDING_COMMANDS:
                break
            assert isinstance(group, click.Group), f"{name}: {' '.join(words[:i])} has no subcommands"
            assert word in group.commands, f"{name}: `uac {' '.join(words[: i + 1])}` does not exist"
            group = group.commands[word]


def test_prometheus_scrapes_every_worker(services: dict[str, dict[str, Any]]) -> None:
    config = _yaml(PROM_DIR / "prometheus.yml")
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "uac-workers"]
    targets = {t for group in job["static_configs"] for t in group["targets"]}
    assert targets == {f"{w}:{_env(services[w])['UAC_WORKER_PORT']}" for w in WORKERS}
    assert job.get("metrics_path", "/metrics") == "/metrics"


# --- Dockerfile ---------------------------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_builds_a_non_root_uac_image() -> None:
    steps = _dockerfile()
    kinds = [k for k, _ in steps]
    assert steps[0] == ("FROM", "python:3.11-slim")
    users = [arg for k, arg in steps if k == "USER"]
    assert users and users[-1] not in {"root", "0"}
    assert ("EXPOSE", "6066") in steps
    assert "ENTRYPOINT" not in kinds  # compose passes full commands
    assert json.loads(next(arg for k, arg in steps if k == "CMD"))[0] == "uac"
    assert re.search(r"\bLITELLM_LOCAL_MODEL_COST_MAP=True\b", " ".join(a for k, a in steps if k == "ENV"))
    assert any(k == "RUN" and re.search(r"pip install \.(\s|$)", a) for k, a in steps)


def test_the_build_copies_only_files_that_exist_and_are_not_ignored() -> None:
    ignored = [ln.strip() for ln in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
               if ln.strip() and not ln.startswith("#")]
    for required in (".venv", ".uac", "deploy/kafka/.jars", "benchmarks/.cache"):
        assert required in ignored
    for kind, arg in _dockerfile():
        if kind != "COPY" or arg.startswith("--from"):
            continue
        *sources, _dest = arg.split()
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: missing"
            hit = [p for p in ignored if Path(source).match(p) or source == p.rstrip("/")]
            assert not hit, f"COPY {source} is excluded by .dockerignore {hit}"


# --- metric names -------------------------------------------------------------------------------


def exported_metrics() -> set[str]:
    """Sample names of every metric uac.metrics.Metrics registers, with prometheus_client's suffixes."""
    names = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        elif family.type == "summary":
            names |= {family.name, f"{family.name}_sum", f"{family.name}_count"}
        else:
            names.add(family.name)
    return names


_PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                    "unless", "offset", "inf", "nan"}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (a small lexer, enough for our dashboards and rules)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", "", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", "", s)  # range selectors
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", s)
    names = set()
    for m in re.finditer(r"(?<![\w:$.])([A-Za-z_:][\w:]*)\s*(\()?", s):
        if not m.group(2) and m.group(1).lower() not in _PROMQL_KEYWORDS:
            names.add(m.group(1))
    return names


def test_the_metric_name_lexer() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, job) (rate(uac_commit_seconds_bucket{instance=~"$i"}'
            '[$__rate_interval]))) > 1e3 and on (job) up offset 5m')
    assert promql_metric_names(expr) == {"uac_commit_seconds_bucket", "up"}
    assert "uac_rejects_total" in exported_metrics()
    assert {"uac_commit_seconds_bucket", "uac_checkpoint_offset"} <= exported_metrics()


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _yaml(PROM_DIR / "rules.yml")["groups"] for rule in group["rules"]]


def test_rules_read_only_exported_metrics() -> None:
    known = exported_metrics() | {"up"}
    for rule in _rules():
        unknown = promql_metric_names(rule["expr"]) - known
        assert not unknown, f"{rule.get('alert') or rule.get('record')} reads unknown {unknown}"
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    assert alerts == {"UacWorkerDown", "UacRejects", "UacRuleFailures", "UacCommitLatencyHigh",
                      "UacModelFailures"}


# --- Grafana ------------------------------------------------------------------------------------


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows nest their panels
    return out


def test_dashboard_queries_use_the_provisioned_datasource_and_real_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "uac-overview"
    assert dashboard["schemaVersion"] >= 39
    records = {rule["record"] for rule in _rules() if "record" in rule}
    known = exported_metrics() | records | {"up"}
    queried: set[str] = set()
    panels = [p for p in _panels(dashboard) if p.get("type") != "row"]
    assert len({p["id"] for p in _panels(dashboard)}) == len(_panels(dashboard)), "duplicate panel ids"
    for panel in panels:
        assert panel["datasource"]["uid"] == "prometheus", panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target.get("datasource", {"uid": "prometheus"})["uid"] == "prometheus"
            names = promql_metric_names(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']}"
            assert names <= known, f"{panel['title']} queries unknown {names - known}"
            queried |= names
    for variable in dashboard.get("templating", {}).get("list", []):
        if "datasource" in variable:
            assert variable["datasource"]["uid"] == "prometheus"
    # Every series uac exports is on the dashboard somewhere (sum/count of the histogram aside).
    missing = exported_metrics() - queried - {"uac_commit_seconds_sum"}
    assert not missing, f"not on the dashboard: {sorted(missing)}"


def test_grafana_provisioning_matches_the_stack(services: dict[str, dict[str, Any]]) -> None:
    (source,) = _yaml(PROVISIONING / "datasources" / "prometheus.yml")["datasources"]
    assert (source["uid"], source["type"]) == ("prometheus", "prometheus")
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)/?", source["url"]).groups()  # type: ignore[union-attr]
    assert host in services and (port, 9090) in [(h, c) for h, c in _host_ports(services[host])]
    (provider,) = _yaml(PROVISIONING / "dashboards" / "uac.yml")["providers"]
    mounts = dict(str(v).split(":")[:2] for v in services["grafana"]["volumes"])
    assert mounts["./dashboards"] == provider["options"]["path"]
    assert _depends_on(services["grafana"]) == {"prometheus": "service_healthy"}


# --- promtool -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not found (apt-get install prometheus, or a Prometheus release tarball)")
    return found


def _run(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


def test_promtool_accepts_the_config_and_rules(promtool: str) -> None:
    _run(promtool, "check", "config", str(PROM_DIR / "prometheus.yml"))  # also checks rule_files
    _run(promtool, "check", "rules", str(PROM_DIR / "rules.yml"))


def _expected(alertname: str, **labels: str) -> dict[str, Any]:
    """The alert rules.yml raises for these series labels, annotations rendered from $labels."""
    (rule,) = [r for r in _rules() if r.get("alert") == alertname]
    every = {**labels, **rule.get("labels", {})}

    def render(text: str) -> str:
        out = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: every[m.group(1)], text)
        assert "{{" not in out, f"{alertname}: only $labels templates are predictable here"
        return out

    return {"exp_labels": every,
            "exp_annotations": {k: render(v) for k, v in rule.get("annotations", {}).items()}}


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    inner = ", ".join(f'{k}="{v}"' for k, v in {"job": "uac-workers", **labels}.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def test_alerts_fire_on_trouble_and_stay_quiet_otherwise(promtool: str, tmp_path: Path) -> None:
    w1, w2 = {"instance": "worker-1:6066"}, {"instance": "worker-2:6066"}
    job = {"job": "uac-workers"}
    series = [
        _series("up", "1 1 0x30", **w1),  # worker-1 goes down at 2m
        _series("up", "1x32", **w2),
        _series("uac_rejects_total", "0+1x30", step_id="extract.validate", **w1),  # a steady reject rate
        _series("uac_rejects_total", "5x30", step_id="ingest.parse", **w2),  # old rejects only
        _series("uac_rule_failures_total", "0 0 0 1 2 2x26", rule_id="drug_allergy", **w1),
        # Every commit takes between 1s and 2.5s.
        *(_series("uac_commit_seconds_bucket", v, le=le, **w1)
          for le, v in (("0.5", "0x30"), ("1.0", "0x30"), ("2.5", "0+10x30"), ("+Inf", "0+10x30"))),
        # 10% of m1's calls fail, none of m2's.
        _series("uac_model_calls_total", "0+9x30", model="m1", outcome="ok", **w1),
        _series("uac_model_calls_total", "0+1x30", model="m1", outcome="failed", **w1),
        _series("uac_model_calls_total", "0+10x30", model="m2", outcome="ok", **w1),
        _series("uac_model_calls_total", "0x30", model="m2", outcome="failed", **w1),
    ]
    checks = [
        ("UacWorkerDown", "2m", []),  # pending: within its `for`
        ("UacWorkerDown", "5m", [_expected("UacWorkerDown", **job, **w1)]),
        ("UacRejects", "3m", []),
        ("UacRejects", "10m", [_expected("UacRejects", **job, step_id="extract.validate")]),
        ("UacRuleFailures", "5m", [_expected("UacRuleFailures", **job, rule_id="drug_allergy")]),
        ("UacRuleFailures", "20m", []),  # no new failure in the last 5 minutes
        ("UacCommitLatencyHigh", "5m", []),
        ("UacCommitLatencyHigh", "20m", [_expected("UacCommitLatencyHigh", **job)]),
        ("UacModelFailures", "20m", [_expected("UacModelFailures", **job, model="m1")]),
    ]
    suite = {
        "rule_files": [str(PROM_DIR / "rules.yml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [{"eval_time": t, "alertname": name, "exp_alerts": exp}
                                for name, t, exp in checks],
        }],
    }
    path = tmp_path / "rules_test.yml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    _run(promtool, "test", "rules", str(path))
