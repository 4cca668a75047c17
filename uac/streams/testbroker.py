"""A real single-node Apache Kafka broker for tests and CI, started from the official jars (no Docker).

Two steps, both explicit:

1. :func:`resolve_jars` copies the broker's jars out of Maven Central once, with the minimal POM in
   ``deploy/kafka/pom.xml`` (``mvn dependency:copy-dependencies``). A stamp file named after the POM's
   hash marks the cache as complete, so later calls cost nothing.
2. :class:`KafkaBroker` formats a temporary KRaft log dir and runs ``java -cp '<jars>/*' kafka.Kafka`` as
   one combined broker+controller node on ``127.0.0.1`` (free ports chosen at start). It is ready when an
   admin call through aiokafka succeeds; :meth:`KafkaBroker.stop` ends the JVM and removes the dir.

::

    jars = resolve_jars(DEFAULT_POM, DEFAULT_JAR_CACHE)
    with KafkaBroker(jars) as broker:
        ...  # connect aiokafka clients to broker.bootstrap ("127.0.0.1:PORT")

Needs ``java`` (17+) and, for the first resolution, ``mvn``; the readiness check needs ``aiokafka``.
The ``DEFAULT_*`` paths point into a source checkout (``deploy/kafka``); an installed copy of uac has no
such dir, so pass the POM, cache and log4j2 config explicitly there.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import fcntl
import hashlib
import importlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, TypeVar

from uac.errors import BrokerError, ConfigError

__all__ = [
    "DEFAULT_JAR_CACHE",
    "DEFAULT_LOG4J_CONFIG",
    "DEFAULT_POM",
    "DEPLOY_DIR",
    "KafkaBroker",
    "resolve_jars",
]

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy" / "kafka"
"""``deploy/kafka`` of a source checkout: the POM, the log4j2 config and the jar cache."""
DEFAULT_POM = DEPLOY_DIR / "pom.xml"
DEFAULT_JAR_CACHE = DEPLOY_DIR / ".jars"
DEFAULT_LOG4J_CONFIG = DEPLOY_DIR / "log4j2.yaml"

_STAMP_PREFIX = ".stamp-"
_T = TypeVar("_T")


def _say(message: str) -> None:
    print(f"[uac.testbroker] {message}", file=sys.stderr, flush=True)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _file_tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            return _tail(f.read().decode("utf-8", "replace"), lines)
    except OSError:
        return ""


# --------------------------------------------------------------------------------------------- jars


def resolve_jars(pom: Path, cache: Path, *, mvn: str = "mvn", maven_repo: Path | None = None,
                 timeout: float = 900.0) -> Path:
    """Copy the broker's jars (the dependencies of ``pom``) into ``cache`` once; return ``cache``.

    Runs ``mvn -q -B -f POM dependency:copy-dependencies -DoutputDirectory=CACHE`` unless
    ``CACHE/.stamp-<hash of the POM>`` exists. Concurrent callers (pytest-xdist workers) are serialised
    by a lock file in the cache. ``maven_repo`` overrides Maven's local repository (``~/.m2``).

    Raises :class:`ConfigError` when the POM or ``mvn`` is missing and :class:`BrokerError` (naming the
    command and the tail of its output) when Maven fails or times out.
    """
    pom = pom.resolve()
    cache = cache.resolve()
    if not pom.is_file():
        raise ConfigError(f"Kafka POM not found: {pom}")
    stamp = cache / f"{_STAMP_PREFIX}{hashlib.sha256(pom.read_bytes()).hexdigest()[:16]}"
    if _cache_complete(cache, stamp):
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _cache_complete(cache, stamp):  # another process may have filled it meanwhile
                _copy_dependencies(pom, cache, stamp, mvn=mvn, maven_repo=maven_repo, timeout=timeout)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return cache


def _cache_complete(cache: Path, stamp: Path) -> bool:
    return stamp.is_file() and any(cache.glob("*.jar"))


def _copy_dependencies(pom: Path, cache: Path, stamp: Path, *, mvn: str, maven_repo: Path | None,
                       timeout: float) -> None:
    exe = shutil.which(mvn)
    if exe is None:
        raise ConfigError(f"Maven ({mvn!r}) is not on PATH: it is needed once to fetch the Kafka jars "
                          f"(apt-get install maven)")
    cache.mkdir(parents=True, exist_ok=True)
    # Jars of another POM version must not stay on the '*' classpath beside the new ones.
    for old in [*cache.glob("*.jar"), *cache.glob(f"{_STAMP_PREFIX}*")]:
        old.unlink()
    cmd = [exe, "-q", "-B", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies",
           f"-DoutputDirectory={cache}"]
    if maven_repo is not None:
        cmd.append(f"-Dmaven.repo.local={maven_repo.resolve()}")
    _say(f"fetching the Kafka jars into {cache} (the first time takes a minute or two): {shlex.join(cmd)}")
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise BrokerError(f"Maven did not finish within {timeout:.0f} s: {shlex.join(cmd)}") from e
    if done.returncode != 0:
        output = _tail(f"{done.stdout}\n{done.stderr}")
        raise BrokerError(f"Maven failed (exit {done.returncode}) fetching the Kafka jars: "
                          f"{shlex.join(cmd)}\n{output}")
    if not any(cache.glob("*.jar")):
        raise BrokerError(f"Maven copied no jars into {cache}: {shlex.join(cmd)}")
    stamp.write_text(f"{pom}\n")
    _say(f"Kafka jars ready in {time.monotonic() - started:.1f} s")


# ------------------------------------------------------------------------------------------- broker


def _free_ports(count: int) -> list[int]:
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _random_cluster_id() -> str:
    """What ``kafka-storage random-uuid`` prints: 16 random bytes, URL-safe base64 without padding."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cid.startswith("-"):  # Kafka avoids these too: they read as command-line flags
            return cid


def _run_coroutine(factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine to completion, also when the caller is already inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="uac-testbroker") as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


def _aiokafka_admin() -> ModuleType:
    try:
        return importlib.import_module("aiokafka.admin")
    except ImportError as e:
        raise ConfigError("the test Kafka broker's readiness check needs aiokafka: "
                          "pip install aiokafka") from e


async def _admin_probe(admin_module: ModuleType, bootstrap: str, timeout: float) -> None:
    """One admin round trip: bootstrap, then a metadata request that must list a broker."""
    admin = admin_module.AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="uac-testbroker",
                                             request_timeout_ms=max(1000, int(timeout * 1000)))
    try:
        async with asyncio.timeout(timeout):
            await admin.start()
            cluster = await admin.describe_cluster()
        if not cluster.get("brokers"):
            raise BrokerError(f"the broker at {bootstrap} answered but lists no brokers yet")
    finally:
        await admin.close()


async def _wait_admin(bootstrap: str, port: int, deadline: float, alive: Callable[[], bool]) -> str | None:
    """Poll until an admin call succeeds (None) or ``deadline`` passes (the last error) or the JVM exits."""
    admin_module = _aiokafka_admin()
    last = "no attempt made"
    while True:
        remaining = deadline - time.monotonic()
        if not alive():
            return "the broker process exited"
        if remaining <= 0:
            return last
        try:
            # A plain TCP connect first: cheap, and keeps aiokafka from logging connection errors while
            # the JVM is still starting.
            with socket.create_connection(("127.0.0.1", port), timeout=min(1.0, remaining)):
                pass
            await _admin_probe(admin_module, bootstrap, min(5.0, max(0.5, remaining)))
            return None
        except Exception as e:  # any failure means "not ready yet"; the deadline bounds the loop
            last = f"{type(e).__name__}: {e}"
        await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


async def _create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str],
                        deadline: float) -> None:
    admin_module = _aiokafka_admin()
    remaining = max(1.0, deadline - time.monotonic())
    admin = admin_module.AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="uac-testbroker",
                                             request_timeout_ms=int(remaining * 1000))
    try:
        async with asyncio.timeout(remaining):
            await admin.start()
            topic = admin_module.NewTopic(name=name, num_partitions=partitions, replication_factor=1,
                                          topic_configs=config)
            response = await admin.create_topics([topic], timeout_ms=int(remaining * 1000))
            for _topic, code, *rest in response.topic_errors:
                if code:
                    message = rest[0] if rest and rest[0] else f"error code {code}"
                    raise BrokerError(f"creating topic {name!r} failed: {message}")
            # Created in the controller; wait until the broker's metadata shows a leader for each partition.
            while True:
                [described] = await admin.describe_topics([name])
                leaders = [p for p in described["partitions"] if p["error_code"] == 0 and p["leader"] >= 0]
                if described["error_code"] == 0 and len(leaders) == partitions:
                    return
                await asyncio.sleep(0.05)
    except TimeoutError as e:
        raise BrokerError(f"topic {name!r} did not get leaders for its {partitions} partitions "
                          f"in time") from e
    finally:
        await admin.close()


@dataclass
class _Runtime:
    """What must be cleaned up even if the KafkaBroker object is dropped without stop()."""

    process: subprocess.Popen[bytes] | None = None
    directory: Path | None = None

    def kill(self) -> None:
        proc = self.process
        if proc is not None and proc.poll() is None:  # still our child: its pid cannot be reused yet
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def kill_and_remove(self) -> None:
        self.kill()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class KafkaBroker:
    """One Kafka 4 node (KRaft, broker and controller combined) on 127.0.0.1, for tests.

    ``jars`` is the directory :func:`resolve_jars` returns. ``config`` adds or overrides entries of the
    generated ``server.properties``. The broker's dir (data, ``server.properties``, ``logs/server.log``,
    ``stdout.log``, ``stderr.log``) is a new temp dir under ``base_dir`` (the system default if None).
    """

    def __init__(self, jars: Path, *, log4j_config: Path = DEFAULT_LOG4J_CONFIG, java: str = "java",
                 heap: str = "768m", start_timeout: float = 90.0, stop_timeout: float = 30.0,
                 base_dir: Path | None = None, config: Mapping[str, str] | None = None) -> None:
        self.jars = jars.resolve()
        self.log4j_config = log4j_config.resolve()
        self.java = java
        self.heap = heap
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.base_dir = base_dir
        self.config: dict[str, str] = dict(config or {})
        self.cluster_id: str | None = None
        self._port: int | None = None
        self._controller_port: int | None = None
        self._rt = _Runtime()
        self._finalizer = weakref.finalize(self, self._rt.kill_and_remove)

    # ------------------------------------------------------------------------------- properties

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the PLAINTEXT listener, for ``bootstrap_servers``."""
        return f"127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        if self._port is None:
            raise BrokerError("the Kafka broker is not started")
        return self._port

    @property
    def controller_port(self) -> int:
        if self._controller_port is None:
            raise BrokerError("the Kafka broker is not started")
        return self._controller_port

    @property
    def directory(self) -> Path:
        """The broker's temp dir (exists from start() until stop())."""
        if self._rt.directory is None:
            raise BrokerError("the Kafka broker is not started")
        return self._rt.directory

    @property
    def running(self) -> bool:
        proc = self._rt.process
        return proc is not None and proc.poll() is None

    # -------------------------------------------------------------------------------- lifecycle

    def start(self) -> KafkaBroker:
        """Format a new temp dir, start the JVM, and return once an admin call succeeds."""
        if self._rt.directory is not None:
            raise BrokerError(f"the Kafka broker is already started ({self.directory})")
        java = self._check_setup()
        began = time.monotonic()
        self._rt.directory = Path(tempfile.mkdtemp(prefix="uac-kafka-", dir=self.base_dir))
        try:
            self._port, self._controller_port = _free_ports(2)
            self.cluster_id = _random_cluster_id()
            self._write_properties()
            self._format(java)
            self._launch(java)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        _say(f"Kafka broker ready at {self.bootstrap} in {time.monotonic() - began:.1f} s ({self.directory})")
        return self

    def stop(self) -> None:
        """SIGTERM the JVM's process group, wait, SIGKILL if needed; remove the temp dir. Idempotent."""
        self._terminate()
        self._rt.kill_and_remove()
        self._rt.process = None
        self._port = self._controller_port = None

    def restart(self) -> None:
        """Stop the JVM (cleanly) and start it again on the same ports and the same data."""
        if self._rt.directory is None:
            raise BrokerError("restart() needs a started Kafka broker")
        java = self._check_setup()
        began = time.monotonic()
        self._terminate()
        try:
            self._launch(java)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        _say(f"Kafka broker restarted at {self.bootstrap} in {time.monotonic() - began:.1f} s")

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def create_topic(self, name: str, partitions: int = 4, *, config: Mapping[str, str] | None = None,
                     timeout: float = 30.0) -> str:
        """Create a topic (replication factor 1) and wait until every partition has a leader; return ``name``.

        ``config`` holds topic configs such as ``{"cleanup.policy": "compact"}``. Raises
        :class:`BrokerError` if the broker refuses (for one, when the topic already exists).
        """
        bootstrap = self.bootstrap
        deadline = time.monotonic() + timeout
        _run_coroutine(lambda: _create_topic(bootstrap, name, partitions, dict(config or {}), deadline))
        return name

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker's server.log, stdout and stderr (for error messages)."""
        directory = self._rt.directory
        if directory is None:
            return ""
        parts = []
        for name in ("logs/server.log", "stdout.log", "stderr.log"):
            text = _file_tail(directory / name, lines)
            if text:
                parts.append(f"--- {name}\n{text}")
        return "\n".join(parts)

    # -------------------------------------------------------------------------------- internals

    def _check_setup(self) -> str:
        java = shutil.which(self.java)
        if java is None:
            raise ConfigError(f"Java ({self.java!r}) is not on PATH: the Kafka broker needs Java 17+")
        if not any(self.jars.glob("kafka_*.jar")):
            raise ConfigError(f"no Kafka jars in {self.jars}: call resolve_jars() first")
        if not self.log4j_config.is_file():
            raise ConfigError(f"log4j2 config for the Kafka broker not found: {self.log4j_config}")
        return java

    def _properties(self) -> dict[str, str]:
        port, cport = self.port, self.controller_port
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            "num.partitions": "4",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.enable": "true",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),  # default 128 MiB: too much for the heap
            # A 2-core machine: fewer threads than the defaults.
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
        }
        props.update(self.config)
        return props

    def _write_properties(self) -> None:
        lines = [f"{key}={value}" for key, value in self._properties().items()]
        (self.directory / "server.properties").write_text("\n".join(lines) + "\n")

    def _jvm(self, java: str, heap: str) -> list[str]:
        logs = self.directory / "logs"
        return [java, f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError",
                "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.log4j_config}",
                f"-Dkafka.logs.dir={logs}", "-cp", f"{self.jars}/*"]

    def _format(self, java: str) -> None:
        cmd = [*self._jvm(java, "256m"), "kafka.tools.StorageTool", "format",
               "--config", str(self.directory / "server.properties"), "--cluster-id", str(self.cluster_id)]
        try:
            done = subprocess.run(cmd, cwd=self.directory, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired as e:
            raise BrokerError(f"formatting the Kafka log dir timed out: {shlex.join(cmd)}") from e
        if done.returncode != 0:
            output = _tail(f"{done.stdout}\n{done.stderr}")
            raise BrokerError(f"formatting the Kafka log dir failed (exit {done.returncode}): "
                              f"{shlex.join(cmd)}\n{output}")

    def _launch(self, java: str) -> None:
        cmd = [*self._jvm(java, self.heap), "kafka.Kafka", str(self.directory / "server.properties")]
        directory = self.directory
        with (directory / "stdout.log").open("ab") as out, (directory / "stderr.log").open("ab") as err:
            self._rt.process = subprocess.Popen(cmd, cwd=directory, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=err, start_new_session=True)

    def _wait_ready(self) -> None:
        proc = self._rt.process
        assert proc is not None
        deadline = time.monotonic() + self.start_timeout
        bootstrap, port = self.bootstrap, self.port
        error = _run_coroutine(lambda: _wait_admin(bootstrap, port, deadline, lambda: proc.poll() is None))
        if error is None:
            return
        state = (f"the JVM exited with code {proc.returncode}" if proc.poll() is not None
                 else f"not ready within {self.start_timeout:.0f} s")
        raise BrokerError(f"the Kafka broker at {bootstrap} did not come up: {state}; "
                          f"last error: {error}\n{self.log_tail()}")

    def _terminate(self) -> None:
        proc = self._rt.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            _say(f"the Kafka broker did not stop within {self.stop_timeout:.0f} s of SIGTERM; killing it")
            self._rt.kill()
