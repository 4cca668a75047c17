"""The Kafka worker: a faust-streaming app running uac's extraction agent.

``uac.turns`` and ``uac.observations`` are consumed as raw bytes (keys and values) and handed to
:class:`~uac.streams.worker_extract.ExtractionAgent`, which decodes them with the Avro codec (a
poison record becomes a dead letter on ``uac.dlq``, and processing goes on), windows turns per user,
extracts closed windows and produces facts and ticks to ``uac.facts``.

What we take from faust, and what we do not (the design's "where faust is fragile" rule):

* agents, a timer, the web server, the consumer group and its offset commits: yes;
* windowed tables, exactly-once, RocksDB: no. Windows are ours (``TurnWindows`` per partition and
  user), ``store="memory://"``, no tables at all, and no leader topic.

Offsets: the agents iterate ``stream.noack()`` and acknowledge a record only once every output it
causes was produced and acknowledged by the broker (see :mod:`uac.streams.worker_extract`); faust
commits the highest *contiguous* acknowledged offset per partition, so a turn still waiting in a
window holds the partition's commit back, and a crash or a restart reads it again. The producer uses
``acks=all``. ``stream_wait_empty`` is off: a rebalance must not wait for windows that may stay open
for a while; the open windows are dropped instead (their turns were never acknowledged, and faust
seeks every partition back to its committed offset after a rebalance).

Web (``web_bind``, default 127.0.0.1): ``/health`` answers ``{"status": "ok", ...}``; ``/metrics``
is the Prometheus text of the worker's :class:`~uac.metrics.Metrics` registry.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from uac.errors import UacError
from uac.extraction.extractor import Extractor, RetryPolicy
from uac.extraction.model import LiteLLMModel
from uac.extraction.windows import WindowPolicy
from uac.metrics import Metrics
from uac.settings import Settings
from uac.streams.worker_checkpoint import CheckpointAgent
from uac.streams.worker_extract import FACTS, OBSERVATIONS, TURNS, ExtractionAgent, Source
from uac.streams.worker_query import JSON_TYPE, NEEDS_CHECKPOINT, QuerySide, Rebuilds, default_url, error

log = logging.getLogger(__name__)
APP_ID = "uac"
DEFAULT_WEB_PORT = 6066
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4"
QUIET_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx")
"""Loggers held at WARNING: faust's worker logs at INFO, and litellm logs every call there."""


def extractor_from(settings: Settings) -> Extractor:
    """The extractor over ``settings.model_name`` (the offline model when none is set)."""
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    model = LiteLLMModel(settings.model_name, api_base=settings.api_base, api_key=key,
                         timeout=settings.model_timeout, response_format=settings.response_format)
    return Extractor(model, retry=RetryPolicy(settings.model_retries, settings.model_backoff))


def window_policy(settings: Settings) -> WindowPolicy:
    return WindowPolicy(settings.extract_window_turns, settings.extract_window_chars,
                        settings.extract_window_span)


def app_id(settings: Settings) -> str:
    """The consumer group (and faust app id): ``uac``, after the topic prefix (one group per
    deployment sharing a cluster)."""
    return f"{settings.topic_prefix}{APP_ID}"


def make_app(settings: Settings, *, worker_id: str = "w1", web_port: int = DEFAULT_WEB_PORT,
             web_bind: str = "127.0.0.1", idle_timeout: float = 2.0, metrics: Metrics | None = None,
             extractor: Extractor | None = None, datadir: Path | None = None,
             session_timeout: float | None = None, checkpoint: bool = False,
             advertise_url: str | None = None) -> Any:
    """A faust app (``faust.App``) running the extraction agent (see the module docstring); it updates
    ``metrics`` (pass one to read it in-process). ``session_timeout``: seconds before the group
    gives a silent worker's partitions to the others (None: faust's default, 60 s, or
    ``BROKER_SESSION_TIMEOUT``). ``checkpoint``: also run the checkpoint agent on ``uac.facts``
    (:mod:`uac.streams.worker_checkpoint`; its topic never commits offsets and is read from the
    start on assignment, since its state is in memory only). ``advertise_url``: where the other
    workers reach this one's web server (default ``http://BIND:PORT``; see
    :mod:`uac.streams.worker_query`)."""
    import faust
    from prometheus_client import generate_latest

    if idle_timeout <= 0:
        raise UacError("the idle timeout must be positive")
    prefix = settings.topic_prefix
    metrics = metrics or Metrics()
    datadir = datadir or settings.data_dir / "worker" / worker_id
    datadir.mkdir(parents=True, exist_ok=True)  # faust keeps little there without tables, but wants it
    liveness: dict[str, Any] = {}
    if session_timeout is not None:
        liveness = {"broker_session_timeout": session_timeout,
                    "broker_heartbeat_interval": max(0.5, min(3.0, session_timeout / 8))}
    app = faust.App(
        app_id(settings),
        broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",") if host.strip()],
        topic_partitions=settings.kafka_partitions,
        topic_replication_factor=settings.kafka_replication,
        topic_disable_leader=True,
        store="memory://",
        autodiscover=False,
        datadir=str(datadir),
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        stream_wait_empty=False,
        web_enabled=True,
        web_port=web_port,
        web_bind=web_bind,
        web_host=web_bind,
        canonical_url=advertise_url or default_url(web_bind, web_port),
        **liveness,
    )

    async def send(topic: str, key: bytes | None, value: bytes | None, partition: int) -> Any:
        return await app.producer.send(topic, key, value, partition, None, None)

    agent = ExtractionAgent(extractor or extractor_from(settings), send,
                            partitions=settings.kafka_partitions, prefix=prefix,
                            policy=window_policy(settings), metrics=metrics, idle_timeout=idle_timeout)

    turns = app.topic(prefix + TURNS, key_serializer="raw", value_serializer="raw")
    observations = app.topic(prefix + OBSERVATIONS, key_serializer="raw", value_serializer="raw")

    def source(event: Any) -> Source:
        message = event.message
        return Source(message.topic, message.partition, message.offset, message.key)

    @app.agent(turns, name="extract-turns")
    async def extract_turns(stream: Any) -> None:
        async for event in stream.noack().events():
            await agent.on_turn(source(event), event.value, event.ack)

    @app.agent(observations, name="extract-observations")
    async def extract_observations(stream: Any) -> None:
        async for event in stream.noack().events():
            await agent.on_observation(source(event), event.value, event.ack)

    @app.timer(interval=max(0.05, min(1.0, idle_timeout / 2)))  # type: ignore[untyped-decorator]
    async def close_idle_windows() -> None:
        closed = await agent.close_idle()
        if closed:
            log.info("closed %d idle extraction window(s)", closed)

    checkpoint_agent: CheckpointAgent | None = None
    if checkpoint:
        checkpoint_agent = CheckpointAgent(send, settings=settings, partitions=settings.kafka_partitions,
                                           prefix=prefix, metrics=metrics, idle_timeout=idle_timeout)
        facts_topic = prefix + FACTS
        rebuilds = Rebuilds(checkpoint_agent)  # for the query side, below
        # acks=False: acknowledging a uac.facts record commits nothing (state is rebuilt from the start)
        facts = app.topic(facts_topic, key_serializer="raw", value_serializer="raw", acks=False)

        @app.agent(facts, name="checkpoint-facts")
        async def checkpoint_facts(stream: Any) -> None:
            assert checkpoint_agent is not None
            async for event in stream.noack().events():
                await checkpoint_agent.on_fact(source(event), event.value, event.ack)
                rebuilds.seen(event.message.partition, event.message.offset)

        @app.timer(interval=max(0.05, min(1.0, idle_timeout / 2)))  # type: ignore[untyped-decorator]
        async def close_idle_checkpoint_windows() -> None:
            assert checkpoint_agent is not None
            closed = await checkpoint_agent.close_idle()
            if closed:
                log.info("closed %d idle checkpoint window(s)", closed)

        @app.on_partitions_assigned.connect
        async def on_assigned(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            assert checkpoint_agent is not None
            assigned = args[0] if args else kwargs.get("assigned", set())
            for tp in assigned:
                if tp.topic == facts_topic and checkpoint_agent.needs_replay(tp.partition):
                    await app.consumer.seek(tp, 0)  # no committed offset: faust will not seek it back

    @app.on_partitions_revoked.connect
    async def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        await agent.reset()
        if checkpoint_agent is not None:
            revoked = args[0] if args else kwargs.get("revoked", set())
            await checkpoint_agent.revoke({tp.partition for tp in revoked if tp.topic == prefix + FACTS})

    # -- the query side (uac.streams.worker_query): /users/{user}/state|facts|alerts|query ----------
    reads: QuerySide | None = None
    if checkpoint_agent is not None:
        from faust.types import TP

        async def end_offsets(partitions: list[int]) -> dict[int, int]:
            ends = await app.consumer.highwaters(*(TP(prefix + FACTS, p) for p in partitions))
            return {tp.partition: int(end) for tp, end in ends.items()}

        reads = QuerySide(checkpoint_agent, rebuilds, worker_id=worker_id, url=str(app.conf.canonical_url),
                          facts_topic=prefix + FACTS, partitions=settings.kafka_partitions,
                          owners=app.router.external_topics_metadata, end_offsets=end_offsets)

        @app.on_partitions_assigned.connect
        async def query_side_assigned(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            assert reads is not None
            assigned = args[0] if args else kwargs.get("assigned", set())
            reads.assigned(tp.partition for tp in assigned if tp.topic == prefix + FACTS)

        @app.on_partitions_revoked.connect
        async def query_side_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            revoked = args[0] if args else kwargs.get("revoked", set())
            rebuilds.revoked(tp.partition for tp in revoked if tp.topic == prefix + FACTS)

    @app.page("/users/{user}/{kind}")
    class UserReads(faust.web.View):
        """GET /users/{user}/state|facts|alerts|query?sql=..., POST /users/{user}/query (SQL body)."""

        async def get(self, request: Any, user: str, kind: str) -> Any:
            if reads is None:
                reply = error(409, NEEDS_CHECKPOINT)
            else:
                reply = await reads.respond(kind, user, request)
            return self.bytes(reply.body, content_type=JSON_TYPE, status=reply.status, headers=reply.headers)

        async def post(self, request: Any, user: str, kind: str) -> Any:
            return await self.get(request, user, kind)

    @app.page("/health")
    async def health(view: Any, request: Any) -> Any:
        return view.json({"status": "ok", "worker_id": worker_id, "pending_turns": agent.pending})

    @app.page("/metrics")
    async def prometheus(view: Any, request: Any) -> Any:
        # aiohttp refuses a charset inside content_type: Prometheus text format, UTF-8 is its default
        return view.bytes(generate_latest(metrics.registry), content_type=PROMETHEUS_CONTENT_TYPE)

    return app


async def check_topics(settings: Settings) -> None:
    """Refuse to start on missing topics or a partition count other than ``kafka_partitions``."""
    from uac.streams.topics import ensure_topics

    statuses = await ensure_topics(settings.kafka_bootstrap, partitions=settings.kafka_partitions,
                                   prefix=settings.topic_prefix, create=False)
    bad = [f"{s.topic}: {s.detail}" for s in statuses if s.outcome == "mismatch"]
    if bad:
        raise UacError("topics are not ready (run `uac topics create`): " + "; ".join(bad))


def run_worker(settings: Settings, worker_id: str = "w1", web_port: int = DEFAULT_WEB_PORT, *,
               web_bind: str = "127.0.0.1", idle_timeout: float = 2.0, loglevel: str = "info",
               check: bool = True, session_timeout: float | None = None,
               checkpoint: bool = False, advertise_url: str | None = None) -> None:
    """Check the topics, then run the worker until SIGTERM/SIGINT (blocks; exits the process the way
    faust's worker does)."""
    import faust

    loop = asyncio.new_event_loop()  # faust's worker runs on the current loop: make it this one
    asyncio.set_event_loop(loop)
    if check:
        loop.run_until_complete(check_topics(settings))
    app = make_app(settings, worker_id=worker_id, web_port=web_port, web_bind=web_bind,
                   idle_timeout=idle_timeout, session_timeout=session_timeout, checkpoint=checkpoint,
                   advertise_url=advertise_url)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False, loop=loop)

    def quiet_loggers() -> None:
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger(name).level))

    async def on_startup_finished() -> None:
        quiet_loggers()  # again, after the worker configured logging

    quiet_loggers()
    app.on_startup_finished = on_startup_finished

    worker.execute_from_commandline()
