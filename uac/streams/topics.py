"""The Kafka topics of uac: names, configs, and creating or verifying them on a cluster.

Every topic is keyed by user and co-partitioned (the same partition count, the
partition chosen from the user id), so one worker owns a user end to end.
``uac.facts`` and ``uac.state`` are compacted: compaction only ever removes a
re-sent copy of the same fact or an entity's older versions, never a fact.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from uac.errors import UacError

log = logging.getLogger(__name__)
DAY_MS = 24 * 3600 * 1000


class TopicError(UacError):
    """A topic is missing, or exists with a partition count or config uac cannot use."""


class BrokerUnreachable(TopicError):
    """No broker answered at the bootstrap address; retry when it is up."""

    retriable = True


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic: its base name, whether it is compacted, its retention, what it carries."""

    name: str
    compacted: bool
    retention_ms: int
    doc: str

    def configs(self) -> dict[str, str]:
        """The topic-level configs uac sets (and checks on an existing topic)."""
        if self.compacted:
            return {"cleanup.policy": "compact", "retention.ms": "-1",
                    "min.compaction.lag.ms": "0"}
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms)}


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("uac.turns", False, 7 * DAY_MS, "conversation turns from chat systems"),
    TopicSpec("uac.observations", False, 7 * DAY_MS, "structured observations from integrations"),
    TopicSpec("uac.facts", True, -1, "the source of truth: every fact, key user_id/fact_id"),
    TopicSpec("uac.state", True, -1, "typed state changelog, key user_id/entity_type/entity_id"),
    TopicSpec("uac.state-changes", False, 7 * DAY_MS, "what each window changed, per user"),
    TopicSpec("uac.alerts", False, 30 * DAY_MS, "alert events: raised and resolved, with evidence"),
    TopicSpec("uac.dlq", False, 30 * DAY_MS, "what could not be processed, with the reason"),
)


@dataclass(frozen=True, slots=True)
class TopicStatus:
    """What :func:`ensure_topics` found or did for one topic."""

    topic: str
    outcome: str
    """``created``, ``ok`` or ``mismatch``."""
    detail: str = ""


def topic_name(spec: TopicSpec, prefix: str = "") -> str:
    return f"{prefix}{spec.name}"


async def ensure_topics(bootstrap: str, *, partitions: int, replication: int = 1, prefix: str = "",
                        create: bool = True, timeout_ms: int = 30_000) -> list[TopicStatus]:
    """Create the missing topics (unless ``create`` is false) and verify the existing ones:
    the same partition count everywhere (co-partitioning) and the configs of :data:`TOPICS`."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms)
    try:
        await admin.start()
    except KafkaError as exc:
        await admin.close()
        raise BrokerUnreachable(f"cannot reach Kafka at {bootstrap}: {exc}; is the broker up? "
                                "(--bootstrap / UAC_KAFKA_BOOTSTRAP)") from exc
    try:
        existing = set(await admin.list_topics())
        wanted = {topic_name(s, prefix): s for s in TOPICS}
        missing = [name for name in wanted if name not in existing]
        out: list[TopicStatus] = []
        if missing and create:
            await admin.create_topics(
                [NewTopic(name, partitions, replication, topic_configs=wanted[name].configs())
                 for name in missing], timeout_ms=timeout_ms)
            out += [TopicStatus(name, "created") for name in missing]
        elif missing:
            out += [TopicStatus(name, "mismatch", "missing") for name in missing]
        present = [name for name in wanted if name in existing]
        if present:
            counts = await _partition_counts(admin, present)
            configs = await _configs(admin, present)
            for name in present:
                out.append(_verify(name, wanted[name], partitions, counts.get(name),
                                   configs.get(name, {})))
        return sorted(out, key=lambda s: s.topic)
    finally:
        await admin.close()


def _verify(name: str, spec: TopicSpec, partitions: int, count: int | None,
            configs: dict[str, str]) -> TopicStatus:
    problems = []
    if count != partitions:
        problems.append(f"{count} partitions, expected {partitions} (topics must be co-partitioned)")
    for key, value in spec.configs().items():
        if key == "min.compaction.lag.ms":
            continue  # a tuning knob: any value keeps facts
        if configs.get(key) != value:
            problems.append(f"{key}={configs.get(key)!r}, expected {value!r}")
    return TopicStatus(name, "mismatch" if problems else "ok", "; ".join(problems))


async def _partition_counts(admin: Any, names: list[str]) -> dict[str, int]:
    described = await admin.describe_topics(names)
    return {d["topic"]: len(d["partitions"]) for d in described if not d.get("error_code")}


async def _configs(admin: Any, names: list[str]) -> dict[str, dict[str, str]]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name) for name in names])
    out: dict[str, dict[str, str]] = {}
    for response in responses:
        for resource in response.resources:
            # (error_code, error_message, resource_type, resource_name, config_entries)
            name, entries = resource[3], resource[4]
            out[name] = {entry[0]: entry[1] for entry in entries}
    return out


# -- keys and partitions: every topic is partitioned by the user id alone ----------------------------
# A key starts with the user id, percent-encoded so that a "/" in it cannot shift the other parts.
def user_key(user_id: str) -> bytes:
    """The key of turns, observations, state changes, alerts and DLQ records."""
    return quote(user_id, safe="").encode()


@functools.lru_cache(maxsize=1 << 16)
def partition_for(user_id: str, partitions: int) -> int:
    """The partition of a user on every uac topic: Kafka's default partitioner (murmur2, as the
    Java client computes it) over :func:`user_key`, so a record keyed by the user lands there too.
    Remembered for the users seen last: murmur2 in Python costs some 8 us, and a worker asks
    several times per record."""
    from aiokafka.partitioner import murmur2

    return int((murmur2(user_key(user_id)) & 0x7FFFFFFF) % partitions)


def fact_key(user_id: str, fact_id: str) -> bytes:
    """The key of ``uac.facts`` (compaction keeps one record per fact)."""
    return user_key(user_id) + b"/" + fact_id.encode()


def state_key(user_id: str, entity_type: str, entity_id: str) -> bytes:
    """The key of ``uac.state`` (compaction keeps each entity's latest version)."""
    return b"/".join((user_key(user_id), quote(entity_type, safe="").encode(),
                      quote(entity_id, safe="").encode()))


def user_of_key(key: bytes) -> str:
    """The user id a record key starts with (every uac key does)."""
    return unquote(key.decode("utf-8", "replace").split("/", 1)[0])
