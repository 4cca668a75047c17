"""The Kafka worker: a faust-streaming app running uac's extraction agent.

``uac.turns`` and ``uac.observations`` are consumed as raw bytes (keys and values) and handed to
:class:`~uac.streams.worker_extract.ExtractionAgent`, which decodes them with the Avro codec (a
poison record becomes a dead letter on ``uac.dlq``, and processing goes on), windows turns per user,
extracts closed windows with the manifest of the user's state and produces facts and ticks to
``uac.facts``. The state is the agent's view of its partitions: on assignment of a ``uac.turns``
partition the agent reads that partition of ``uac.facts`` back before extracting any of its windows
(:mod:`uac.streams.worker_view`); on revocation the view is dropped.

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
import gc
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from uac.errors import UacError
from uac.extraction.extractor import Extractor, RetryPolicy
from uac.extraction.model import LiteLLMModel
from uac.extraction.windows import WindowPolicy
from uac.metrics import Metrics
from uac.settings import Settings
from uac.streams.avro import AvroCodec
from uac.streams.kafka_store import ALERTS, STATE
from uac.streams.worker_checkpoint import CheckpointAgent, RestoreFn
from uac.streams.worker_extract import FACTS, OBSERVATIONS, TURNS, ExtractionAgent, Source
from uac.streams.worker_query import JSON_TYPE, NEEDS_CHECKPOINT, QuerySide, Rebuilds, default_url, error
from uac.streams.worker_restore import Restored, read_partition, restore_batch
from uac.streams.worker_view import read_records

log = logging.getLogger(__name__)
APP_ID = "uac"
DEFAULT_WEB_PORT = 6066
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4"
QUIET_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx")
"""Loggers held at WARNING: faust's worker logs at INFO, and litellm logs every call there."""
GC_THRESHOLDS = (50_000, 20, 10)
"""The worker process's garbage-collector thresholds (Python's default: 700, 10, 10). The worker
holds many long-lived objects (litellm's import alone leaves some 300,000, then the folded state of
its partitions) and allocates a few hundred thousand short-lived ones a second; at the default the
collector ran some 500 times in an 8,000-turn backlog, full collections of the whole heap among them,
and took nearly a second of CPU. Memory is still freed by reference counting as before; only the
cycles wait a little longer for a collection."""


def extractor_from(settings: Settings) -> Extractor:
    """The extractor over ``settings.model_name`` (the offline model when none is set)."""
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    model = LiteLLMModel(settings.model_name, api_base=settings.api_base, api_key=key,
                         timeout=settings.model_timeout, response_format=settings.response_format)
    return Extractor(model, retry=RetryPolicy(settings.model_retries, settings.model_backoff))


def window_policy(settings: Settings) -> WindowPolicy:
    return WindowPolicy(settings.extract_window_turns, settings.extract_window_chars,
                        settings.extract_window_span)


def idle_check_interval(idle_timeout: float) -> float:
    """How often the timers look for idle windows: a window closes at most this late after its
    idle timeout (50 ms at the default 2 s; the check costs a pass over the open windows)."""
    return max(0.01, min(0.05, idle_timeout / 20))


def app_id(settings: Settings) -> str:
    """The consumer group (and faust app id): ``uac``, after the topic prefix (one group per
    deployment sharing a cluster)."""
    return f"{settings.topic_prefix}{APP_ID}"


def make_app(settings: Settings, *, worker_id: str = "w1", web_port: int = DEFAULT_WEB_PORT,
             web_bind: str = "127.0.0.1", idle_timeout: float = 2.0, metrics: Metrics | None = None,
             extractor: Extractor | None = None, datadir: Path | None = None,
             session_timeout: float | None = None, checkpoint: bool = False,
             advertise_url: str | None = None, clock_tick: float = 0.0) -> Any:
    """A faust app (``faust.App``) running the extraction agent (see the module docstring); it updates
    ``metrics`` (pass one to read it in-process). ``session_timeout``: seconds before the group
    gives a silent worker's partitions to the others (None: faust's default, 60 s, or
    ``BROKER_SESSION_TIMEOUT``). ``checkpoint``: also run the checkpoint agent on ``uac.facts``
    (:mod:`uac.streams.worker_checkpoint`; a partition it gets is restored from ``uac.state`` and
    ``uac.alerts``, then read on from the group's committed offset). ``advertise_url``: where the
    other workers reach this one's web server (default ``http://BIND:PORT``; see
    :mod:`uac.streams.worker_query`). ``clock_tick``: seconds between wall-clock ticks on the
    partitions this worker folds (0: none; needs ``checkpoint``)."""
    import faust
    from prometheus_client import generate_latest

    if idle_timeout <= 0:
        raise UacError("the idle timeout must be positive")
    if clock_tick < 0 or (clock_tick and not checkpoint):
        raise UacError("a wall-clock tick needs a positive interval and the checkpoint agent "
                       "(--checkpoint)")
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
                            policy=window_policy(settings), metrics=metrics, idle_timeout=idle_timeout,
                            read=lambda topic, parts: read_records(settings.kafka_bootstrap, topic, parts))

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

    @app.timer(interval=idle_check_interval(idle_timeout))  # type: ignore[untyped-decorator]
    async def close_idle_windows() -> None:
        closed = await agent.close_idle()
        if closed:
            log.info("closed %d idle extraction window(s)", closed)

    checkpoint_agent: CheckpointAgent | None = None
    if checkpoint:
        checkpoint_agent = CheckpointAgent(send, settings=settings, partitions=settings.kafka_partitions,
                                           prefix=prefix, metrics=metrics, idle_timeout=idle_timeout,
                                           restore=restorer(settings))
        facts_topic = prefix + FACTS
        rebuilds = Rebuilds(checkpoint_agent)  # for the query side, below
        # acknowledged (so committed) only once a window's outputs are produced
        facts = app.topic(facts_topic, key_serializer="raw", value_serializer="raw")

        @app.agent(facts, name="checkpoint-facts")
        async def checkpoint_facts(stream: Any) -> None:
            assert checkpoint_agent is not None
            async for event in stream.noack().events():
                await checkpoint_agent.on_fact(source(event), event.value, event.ack)
                rebuilds.seen(event.message.partition, event.message.offset)

        takeovers: set[asyncio.Future[None]] = set()

        @app.on_partitions_assigned.connect
        async def checkpoint_assigned(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            assert checkpoint_agent is not None  # restored in the background: a rebalance must not wait
            assigned = args[0] if args else kwargs.get("assigned", set())
            mine = {tp.partition for tp in assigned if tp.topic == facts_topic}
            if mine:
                task = asyncio.ensure_future(checkpoint_agent.take_over(mine))
                takeovers.add(task)
                task.add_done_callback(takeovers.discard)

        if clock_tick:
            @app.timer(interval=clock_tick)  # type: ignore[untyped-decorator]
            async def wall_clock_tick() -> None:
                assert checkpoint_agent is not None  # the wall clock is read here, at the edge only
                await checkpoint_agent.clock_tick(datetime.now(UTC))

        @app.timer(interval=idle_check_interval(idle_timeout))  # type: ignore[untyped-decorator]
        async def close_idle_checkpoint_windows() -> None:
            assert checkpoint_agent is not None
            closed = await checkpoint_agent.close_idle()
            if closed:
                log.info("closed %d idle checkpoint window(s)", closed)

    @app.on_partitions_assigned.connect
    async def on_turns_assigned(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        assigned = args[0] if args else kwargs.get("assigned", set())
        agent.assign({tp.partition for tp in assigned if tp.topic == prefix + TURNS})  # views rebuilt

    @app.on_partitions_revoked.connect
    async def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        revoked = args[0] if args else kwargs.get("revoked", set())
        await agent.reset({tp.partition for tp in revoked if tp.topic == prefix + TURNS})
        if checkpoint_agent is not None:
            await checkpoint_agent.revoke({tp.partition for tp in revoked if tp.topic == prefix + FACTS})

    # -- the query side (uac.streams.worker_query): /users/{user}/state|facts|alerts|query ----------
    reads: QuerySide | None = None
    if checkpoint_agent is not None:
        from faust.types import TP

        async def end_offsets(partitions: list[int]) -> dict[int, int]:
            """The offset each partition must be read to before its users are answered: its end
            offset, or 0 when the group's committed offset is already there (the restored state
            is all there is)."""
            ends = await app.consumer.highwaters(*(TP(prefix + FACTS, p) for p in partitions))
            done = await committed_offsets(settings.kafka_bootstrap, app_id(settings), prefix + FACTS)
            return {tp.partition: 0 if done.get(tp.partition, -1) >= int(end) else int(end)
                    for tp, end in ends.items()}

        reads = QuerySide(checkpoint_agent, rebuilds, worker_id=worker_id, url=str(app.conf.canonical_url),
                          facts_topic=prefix + FACTS, partitions=settings.kafka_partitions,
                          owners=app.router.external_topics_metadata, end_offsets=end_offsets,
                          query_timeout=settings.query_timeout)

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


async def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The consumer group's committed offset of each partition of ``topic`` (absent: none)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: int(meta.offset) for tp, meta in offsets.items() if tp.topic == topic}


def restorer(settings: Settings) -> RestoreFn:
    """How the checkpoint agent takes over a partition: ``uac.state`` and ``uac.alerts`` read back
    (:mod:`uac.streams.worker_restore`)."""
    codec = AvroCodec()

    async def restore(partition: int) -> Restored:
        prefix, bootstrap = settings.topic_prefix, settings.kafka_bootstrap
        state = await read_partition(bootstrap, prefix + STATE, partition)
        alerts = await read_partition(bootstrap, prefix + ALERTS, partition)
        return restore_batch(state, alerts, codec)

    return restore


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
               checkpoint: bool = False, advertise_url: str | None = None,
               clock_tick: float = 0.0) -> None:
    """Check the topics, then run the worker until SIGTERM/SIGINT (blocks; exits the process the way
    faust's worker does)."""
    import faust

    gc.set_threshold(*GC_THRESHOLDS)  # this process only (see GC_THRESHOLDS)
    loop = asyncio.new_event_loop()  # faust's worker runs on the current loop: make it this one
    asyncio.set_event_loop(loop)
    if check:
        loop.run_until_complete(check_topics(settings))
    app = make_app(settings, worker_id=worker_id, web_port=web_port, web_bind=web_bind,
                   idle_timeout=idle_timeout, session_timeout=session_timeout, checkpoint=checkpoint,
                   advertise_url=advertise_url, clock_tick=clock_tick)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False, loop=loop)

    def quiet_loggers() -> None:
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger(name).level))

    async def on_startup_finished() -> None:
        quiet_loggers()  # again, after the worker configured logging

    quiet_loggers()
    app.on_startup_finished = on_startup_finished

    worker.execute_from_commandline()
