"""Prometheus metrics of a pipeline. Each pipeline gets its own registry (no global state)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class Metrics:
    """The counters and gauges every stage updates; labels always include ``step_id``."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.records_in = Counter("uac_records_in", "Input records read", ["step_id"], registry=r)
        self.rejects = Counter("uac_rejects", "Inputs refused and kept in the reject store",
                               ["step_id"], registry=r)
        self.facts_appended = Counter("uac_facts_appended", "Facts appended to the log",
                                      registry=r)
        self.facts_duplicate = Counter("uac_facts_duplicate",
                                       "Facts already in the log (idempotent re-ingest)",
                                       registry=r)
        self.facts_folded = Counter("uac_facts_folded", "Facts folded into state", registry=r)
        self.windows = Counter("uac_windows", "Checkpoint windows closed", registry=r)
        self.alerts = Counter("uac_alert_events", "Alert events", ["rule_id", "kind"],
                              registry=r)
        self.rule_failures = Counter("uac_rule_failures", "Rules that crashed", ["rule_id"],
                                     registry=r)
        self.commit_seconds = Histogram("uac_commit_seconds", "Store commit latency",
                                        registry=r)
        self.model_calls = Counter("uac_model_calls", "Model calls of the extraction stage",
                                   ["model", "outcome"], registry=r)
        self.model_tokens = Counter("uac_model_tokens", "Tokens of extraction model calls",
                                    ["model", "kind"], registry=r)
        self.model_cost = Counter("uac_model_cost_usd", "Cost of extraction model calls (litellm)",
                                  ["model"], registry=r)
        self.checkpoint_offset = Gauge("uac_checkpoint_offset", "Next log offset to fold",
                                       registry=r)

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value, e.g. ``value("uac_rejects_total", step_id="ingest.parse")``."""
        found = self.registry.get_sample_value(name, labels or None)
        return float(found or 0.0)
