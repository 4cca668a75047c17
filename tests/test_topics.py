"""`uac topics create|verify` against the real broker: configs, co-partitioning, mismatches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from uac.streams.testbroker import KafkaBroker
from uac.streams.topics import TOPICS, fact_key, partition_for, state_key, user_key, user_of_key


def uac(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run([sys.executable, "-m", "uac.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.kafka
def test_create_makes_every_topic_and_verify_accepts_them(kafka_broker: KafkaBroker) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}-"
    common = ["--bootstrap", kafka_broker.bootstrap, "--prefix", prefix, "--partitions", "3"]
    done = uac("topics", "create", *common, "--json")
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    assert sorted(r["topic"] for r in created) == sorted(prefix + s.name for s in TOPICS)
    assert {r["outcome"] for r in created} == {"created"}
    again = uac("topics", "verify", *common, "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert {r["outcome"] for r in json.loads(again.stdout)} == {"ok"}  # configs checked too


@pytest.mark.kafka
def test_verify_reports_a_topic_with_another_partition_count(kafka_broker: KafkaBroker) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}-"
    done = uac("topics", "create", "--bootstrap", kafka_broker.bootstrap, "--prefix", prefix,
               "--partitions", "2")
    assert done.returncode == 0, done.stderr
    check = uac("topics", "verify", "--bootstrap", kafka_broker.bootstrap, "--prefix", prefix,
                "--partitions", "4", "--json")
    assert check.returncode == 4
    rows = json.loads(check.stdout)
    assert all(r["outcome"] == "mismatch" and "2 partitions, expected 4" in r["detail"] for r in rows)


@pytest.mark.kafka
def test_verify_reports_missing_topics_without_creating_them(kafka_broker: KafkaBroker) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}-"
    check = uac("topics", "verify", "--bootstrap", kafka_broker.bootstrap, "--prefix", prefix,
                "--json")
    assert check.returncode == 4
    assert {(r["outcome"], r["detail"]) for r in json.loads(check.stdout)} == {("mismatch", "missing")}


def test_an_unreachable_broker_is_a_clear_retriable_error() -> None:
    done = uac("topics", "verify", "--bootstrap", "127.0.0.1:1")
    assert done.returncode == 1
    assert "cannot reach Kafka at 127.0.0.1:1" in done.stderr and "retry" in done.stderr


# Kafka's own murmur2 test vectors (clients/.../UtilsTest.java), as the Java client's signed ints.
JAVA_MURMUR2 = [(b"21", -973932308), (b"foobar", -790332482),
                (b"a-little-bit-long-string", -985981536),
                (b"a-little-bit-longer-string", -1486304829),
                (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971), (b"abc", 479470107)]


@pytest.mark.parametrize(("key", "java"), JAVA_MURMUR2)
@pytest.mark.parametrize("partitions", [1, 7, 8, 64])
def test_a_user_lands_where_the_java_client_puts_its_key(key: bytes, java: int,
                                                         partitions: int) -> None:
    assert partition_for(key.decode(), partitions) == (java & 0x7FFFFFFF) % partitions


def test_keys_start_with_the_user_even_when_it_holds_a_slash() -> None:
    assert user_key("a/b c") == b"a%2Fb%20c"
    assert fact_key("a/b", "f1") == b"a%2Fb/f1" and user_of_key(fact_key("a/b", "f1")) == "a/b"
    assert user_of_key(state_key("a/b", "trip", "x/y")) == "a/b"
    assert state_key("u", "trip", "x/y") == b"u/trip/x%2Fy"
