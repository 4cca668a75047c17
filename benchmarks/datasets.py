"""Building benchmark data: logs cut into windows as the pipeline cuts them, and a cache.

A log is written exactly as :class:`uac.streams.embedded.EmbeddedPipeline`
writes one: records in order, with a :class:`~uac.domains.facts.WindowMark`
wherever :class:`~uac.checkpointer.windows.WindowPolicy` closes a window
(after ``window_facts`` facts, once a window spans ``window_span`` of event
time, around a clock tick) and one at the end.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path

from uac.checkpointer.windows import WindowPolicy
from uac.domains.facts import Fact, LogRecord, Tick, WindowMark
from uac.streams.log import FileFactLog, InMemoryFactLog

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
"""Generated logs are kept here between runs (git-ignored); ``--no-cache`` rebuilds them."""
_CACHE_INPUTS = (
    HERE / "generator.py", HERE / "datasets.py",
)


def windowed(records: Iterable[Fact | Tick], *, window_facts: int = 1000,
             window_span: timedelta = timedelta(days=1), first_window: int = 0
             ) -> Iterator[LogRecord]:
    """``records`` with window marks where the pipeline's window policy puts them."""
    policy = WindowPolicy(window_facts, window_span)
    window = first_window
    for record in records:
        before = policy.closes_before(record)
        if before is not None:
            yield WindowMark(window, reason=before)
            window += 1
        yield record
        after = policy.closes_after(record)
        if after is not None:
            yield WindowMark(window, reason=after)
            window += 1
    if policy.open:
        yield WindowMark(window, reason="end")


def write_log(path: Path, records: Iterable[LogRecord], *, chunk: int = 20_000) -> int:
    """Append ``records`` to the file log at ``path`` (created if needed), fsync; return the count."""
    count = 0
    with FileFactLog(path) as log:
        batch: list[LogRecord] = []
        for record in records:
            batch.append(record)
            if len(batch) >= chunk:
                count += log.append(batch).appended
                batch = []
        count += log.append(batch).appended
        log.flush()
    return count


def memory_log(records: Iterable[LogRecord]) -> InMemoryFactLog:
    log = InMemoryFactLog()
    log.append(list(records))
    return log


def cache_key(*parts: object) -> str:
    """A key for cached data: the parameters plus the source of the code that generates it
    and of uac's log codec (a change to either invalidates the cache)."""
    import uac.domains.facts
    import uac.streams.codec

    digest = hashlib.blake2b(digest_size=8)
    digest.update(repr(parts).encode())
    for source in (*_CACHE_INPUTS, Path(uac.streams.codec.__file__), Path(uac.domains.facts.__file__)):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def cached_log(name: str, key: str, build: Callable[[Path], None], *, use_cache: bool) -> Path:
    """The path of a log file built by ``build(path)``, reused from the cache when its key matches."""
    folder = CACHE / f"{name}-{key}"
    path = folder / "facts.log"
    if use_cache and (folder / "complete").exists():
        return path
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    build(path)
    (folder / "complete").write_text("ok\n")
    for stale in CACHE.glob(f"{name}-*"):  # keep one version per data set
        if stale != folder:
            shutil.rmtree(stale, ignore_errors=True)
    return path


def copy_log(source: Path, target: Path) -> None:
    """Put a copy of the log ``source`` at ``target`` (a data dir's log path)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
