"""The reject store (the embedded dead-letter queue): bad input kept with its reason.

Nothing is dropped silently: a line that does not parse, an observation that
does not validate, a rule that crashes, each becomes a :class:`Reject` naming
the step, where the input came from and why it was refused.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import orjson

REJECT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Reject:
    """One refused input: the pipeline step, where it came from, why, and the raw payload."""

    step_id: str
    source: str
    reason: str
    payload: str
    version: int = REJECT_VERSION


class RejectStore(ABC):
    """Where refused inputs go (a dead-letter topic in the Kafka deployment)."""

    @abstractmethod
    def add(self, reject: Reject) -> None: ...

    @abstractmethod
    def __iter__(self) -> Iterator[Reject]: ...

    def flush(self) -> None:  # noqa: B027
        """Make added rejects durable."""

    def close(self) -> None:  # noqa: B027
        """Release resources."""


class InMemoryRejectStore(RejectStore):
    def __init__(self) -> None:
        self.items: list[Reject] = []

    def add(self, reject: Reject) -> None:
        self.items.append(reject)

    def __iter__(self) -> Iterator[Reject]:
        return iter(list(self.items))


class JsonlRejectStore(RejectStore):
    """Rejects as JSON Lines in a file, appended and fsynced on flush."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._out: IO[bytes] | None = None

    def add(self, reject: Reject) -> None:
        if self._out is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._out = open(self.path, "ab")  # noqa: SIM115
        self._out.write(orjson.dumps(asdict(reject)) + b"\n")

    def __iter__(self) -> Iterator[Reject]:
        self.flush()
        if not self.path.exists():
            return
        with open(self.path, "rb") as fh:
            for line in fh:
                if line.endswith(b"\n"):
                    data = orjson.loads(line)
                    yield Reject(**{k: data[k] for k in ("step_id", "source", "reason", "payload")})

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()
            os.fsync(self._out.fileno())

    def close(self) -> None:
        if self._out is not None:
            self.flush()
            self._out.close()
            self._out = None
