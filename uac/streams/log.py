"""The fact log port: an append-only, durable sequence of records with offsets.

``FactLog`` is the abstract port; :class:`InMemoryFactLog` and
:class:`FileFactLog` (a local file, the embedded default) implement it, and
one contract test suite runs against both. A Kafka topic is the third adapter.
Appending a fact whose id the log already holds is a no-op (idempotent ingest).
"""

from __future__ import annotations

import fcntl
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from uac.domains.facts import Fact, LogRecord
from uac.errors import LogError, LogLockedError, ValidationError
from uac.streams.codec import decode_record, encode_record

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append did: records written, duplicate facts skipped, the new end offset."""

    appended: int
    duplicates: int
    end_offset: int


class FactLog(ABC):
    """An append-only log of facts, ticks and window marks. Offsets start at 0."""

    @abstractmethod
    def append(self, records: Sequence[LogRecord]) -> AppendResult:
        """Append records in order, skipping facts already in the log (by fact id)."""

    @abstractmethod
    def read_entries(self, start: int = 0) -> Iterator[tuple[int, LogRecord, bytes]]:
        """Records from offset ``start`` to the current end: (offset, record, encoded bytes)."""

    def read(self, start: int = 0) -> Iterator[tuple[int, LogRecord]]:
        """Records from offset ``start`` to the current end, with their offsets."""
        for offset, record, _ in self.read_entries(start):
            yield offset, record

    @abstractmethod
    def end_offset(self) -> int:
        """The offset the next record will get."""

    @abstractmethod
    def contains(self, fact_id: str) -> bool:
        """Whether a fact with this id is in the log."""

    def flush(self) -> None:  # noqa: B027  (optional for adapters without buffering)
        """Make everything appended so far durable."""

    def close(self) -> None:  # noqa: B027
        """Release resources (and the writer lock)."""

    def __enter__(self) -> FactLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InMemoryFactLog(FactLog):
    """The log as a Python list: for tests and for embedding without a disk."""

    def __init__(self) -> None:
        self._records: list[tuple[LogRecord, bytes]] = []
        self._ids: set[str] = set()

    def append(self, records: Sequence[LogRecord]) -> AppendResult:
        appended = duplicates = 0
        for record in records:
            if isinstance(record, Fact):
                if record.fact_id in self._ids:
                    duplicates += 1
                    continue
                self._ids.add(record.fact_id)
            self._records.append((record, encode_record(record)))
            appended += 1
        return AppendResult(appended, duplicates, len(self._records))

    def read_entries(self, start: int = 0) -> Iterator[tuple[int, LogRecord, bytes]]:
        end = len(self._records)
        for offset in range(max(start, 0), end):
            record, raw = self._records[offset]
            yield offset, record, raw

    def end_offset(self) -> int:
        return len(self._records)

    def contains(self, fact_id: str) -> bool:
        return fact_id in self._ids


_ID_PREFIX = b'{"kind":"fact","fact_id":"'


class FileFactLog(FactLog):
    """The embedded default: one JSON Lines file, one record a line, offset = line number.

    A writer takes an exclusive ``flock`` on ``<path>.lock`` (one writer at a
    time; readers need no lock and see complete lines only), drops a torn last
    line left by a crash, and fsyncs on :meth:`flush`.
    """

    _INDEX_EVERY = 4096

    def __init__(self, path: Path, *, writer: bool = True) -> None:
        self.path = Path(path)
        self.writer = writer
        self._lock: IO[bytes] | None = None
        self._out: IO[bytes] | None = None
        self._ids: set[str] = set()
        self._positions: list[int] = [0]  # byte position of every _INDEX_EVERY-th line
        self._end = 0
        if writer:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._acquire_lock()
            self._recover()
            self._out = open(self.path, "ab")  # noqa: SIM115  (held for the log's lifetime)
        elif self.path.exists():
            self._scan(collect_ids=False)

    def _acquire_lock(self) -> None:
        lock = open(self.path.with_name(self.path.name + ".lock"), "a+b")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().decode(errors="replace").strip() or "unknown"
            lock.close()
            raise LogLockedError(
                f"the fact log {self.path} is being written by another uac process "
                f"(pid {holder}); wait for it to finish and retry"
            ) from None
        lock.truncate(0)
        lock.write(str(os.getpid()).encode())
        lock.flush()
        self._lock = lock

    def _recover(self) -> None:
        if not self.path.exists():
            self.path.touch()
            return
        good = self._scan(collect_ids=True)
        size = self.path.stat().st_size
        if good < size:
            log.warning("fact log %s: dropping a torn last record (%d bytes) left by a crash",
                        self.path, size - good)
            with open(self.path, "r+b") as fh:
                fh.truncate(good)

    def _scan(self, *, collect_ids: bool) -> int:
        """Count complete lines (and collect fact ids); return the byte length they cover."""
        position = 0
        count = 0
        prefix_len = len(_ID_PREFIX)
        with open(self.path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break
                if collect_ids and line.startswith(_ID_PREFIX):
                    self._ids.add(line[prefix_len:prefix_len + 32].decode())
                position += len(line)
                count += 1
                if count % self._INDEX_EVERY == 0:
                    self._positions.append(position)
        self._end = count
        return position

    def append(self, records: Sequence[LogRecord]) -> AppendResult:
        if self._out is None:
            raise LogError(f"the fact log {self.path} was opened read-only")
        lines = []
        duplicates = 0
        for record in records:
            if isinstance(record, Fact):
                if record.fact_id in self._ids:
                    duplicates += 1
                    continue
                self._ids.add(record.fact_id)
            lines.append(encode_record(record))
        if lines:
            position = self._out.tell()
            self._out.write(b"\n".join(lines) + b"\n")
            for line in lines:
                position += len(line) + 1
                self._end += 1
                if self._end % self._INDEX_EVERY == 0:
                    self._positions.append(position)
        return AppendResult(len(lines), duplicates, self._end)

    def read_entries(self, start: int = 0) -> Iterator[tuple[int, LogRecord, bytes]]:
        if self._out is not None:
            self._out.flush()
        if not self.path.exists():
            return
        start = max(start, 0)
        block = min(start // self._INDEX_EVERY, len(self._positions) - 1)
        offset = block * self._INDEX_EVERY
        with open(self.path, "rb") as fh:
            fh.seek(self._positions[block])
            for line in fh:
                if not line.endswith(b"\n"):
                    return  # a writer is mid-line: stop at the last complete record
                if offset >= start:
                    try:
                        record = decode_record(line)
                    except ValidationError as exc:
                        raise LogError(f"{self.path}, offset {offset}: {exc}") from None
                    yield offset, record, line[:-1]
                offset += 1

    def end_offset(self) -> int:
        if self._out is None and self.path.exists():
            self._positions = [0]
            self._scan(collect_ids=False)
        return self._end

    def contains(self, fact_id: str) -> bool:
        return fact_id in self._ids

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()
            os.fsync(self._out.fileno())

    def close(self) -> None:
        if self._out is not None:
            self.flush()
            self._out.close()
            self._out = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None
