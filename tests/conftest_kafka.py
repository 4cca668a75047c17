"""Pytest plugin: one real Kafka broker per test session, started from the Maven jars.

Load it from the top conftest with ``pytest_plugins = ["tests.conftest_kafka"]`` (or ``-p
tests.conftest_kafka``). Tests that use ``kafka_broker`` or ``topic_factory`` should be marked
``@pytest.mark.kafka``. The broker starts lazily, the first time a test asks for it; the first run on a
machine also fetches the jars with Maven (a minute or two; cached in deploy/kafka/.jars).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest

from uac.streams.testbroker import DEFAULT_JAR_CACHE, DEFAULT_POM, KafkaBroker, resolve_jars

TopicFactory = Callable[..., str]


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A started single-node Kafka broker on 127.0.0.1, shared by the session; stopped at its end."""
    broker = KafkaBroker(resolve_jars(DEFAULT_POM, DEFAULT_JAR_CACHE))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def topic_factory(kafka_broker: KafkaBroker) -> TopicFactory:
    """``topic_factory(partitions=4, *, config=None, prefix="test")`` creates a uniquely named topic.

    Returns the name once every partition has a leader. ``config`` holds topic configs, e.g.
    ``{"cleanup.policy": "compact"}``.
    """

    def create(partitions: int = 4, *, config: Mapping[str, str] | None = None, prefix: str = "test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        return kafka_broker.create_topic(name, partitions, config=config)

    return create
