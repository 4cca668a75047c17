"""The extraction ledger: which turns were extracted, and every window's model use.

A turn is recorded once the facts of its window are durable in the log, so
ingesting the same turns again asks no model and adds nothing; a window that
failed is not recorded, so ingesting it again tries again. Model use (calls,
tokens, cost) is kept per window and summed per user and per model.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from uac.domains.facts import to_utc
from uac.errors import LogError
from uac.extraction.extractor import ModelCall


@dataclass(frozen=True, slots=True)
class UsageTotal:
    """Model use summed over windows (for one user, one model, or both)."""

    windows: int = 0
    calls: int = 0
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    failed: int = 0

    def plus(self, call: ModelCall) -> UsageTotal:
        return UsageTotal(self.windows + 1, self.calls + call.calls, self.turns + len(call.turn_ids),
                          self.prompt_tokens + call.prompt_tokens,
                          self.completion_tokens + call.completion_tokens, self.cost + call.cost,
                          self.failed + int(call.outcome == "failed"))


class ExtractionLedger(ABC):
    """Where extracted turn ids and model calls are kept (a port: in memory, or files)."""

    @abstractmethod
    def extracted(self, user_id: str, turn_id: str) -> bool:
        """Whether this turn's window was extracted and its facts are in the log."""

    @abstractmethod
    def mark_extracted(self, user_id: str, turn_ids: Iterable[str]) -> None: ...

    @abstractmethod
    def add_call(self, call: ModelCall) -> None: ...

    @abstractmethod
    def calls(self) -> Iterator[ModelCall]: ...

    def flush(self) -> None:  # noqa: B027
        """Make what was added durable."""

    def close(self) -> None:  # noqa: B027
        """Release resources."""

    def usage(self) -> dict[tuple[str, str], UsageTotal]:
        """Model use per (user, model)."""
        out: dict[tuple[str, str], UsageTotal] = {}
        for call in self.calls():
            key = (call.user_id, call.model)
            out[key] = out.get(key, UsageTotal()).plus(call)
        return out


class InMemoryExtractionLedger(ExtractionLedger):
    def __init__(self) -> None:
        self._done: set[tuple[str, str]] = set()
        self._calls: list[ModelCall] = []

    def extracted(self, user_id: str, turn_id: str) -> bool:
        return (user_id, turn_id) in self._done

    def mark_extracted(self, user_id: str, turn_ids: Iterable[str]) -> None:
        self._done.update((user_id, t) for t in turn_ids)

    def add_call(self, call: ModelCall) -> None:
        self._calls.append(call)

    def calls(self) -> Iterator[ModelCall]:
        return iter(list(self._calls))


def call_from_json(data: dict[str, Any]) -> ModelCall:
    return ModelCall(str(data["user"]), str(data["model"]), tuple(data["turns"]), to_utc(data["at"]),
                     int(data["calls"]), int(data["prompt_tokens"]), int(data["completion_tokens"]),
                     float(data["cost"]), float(data["seconds"]), str(data["outcome"]),
                     str(data.get("reason", "")), int(data.get("version", 1)))


class JsonlExtractionLedger(ExtractionLedger):
    """Two JSON Lines files in a directory: ``turns_extracted.jsonl`` and ``model_calls.jsonl``."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._turns_path = directory / "turns_extracted.jsonl"
        self._calls_path = directory / "model_calls.jsonl"
        self._memory = InMemoryExtractionLedger()
        for path in (self._turns_path, self._calls_path):
            _drop_torn_tail(path)
        for data in _read(self._turns_path):
            self._memory.mark_extracted(str(data["user"]), [str(t) for t in data["turns"]])
        for data in _read(self._calls_path):
            self._memory.add_call(call_from_json(data))
        self._turns_out: IO[bytes] = open(self._turns_path, "ab")  # noqa: SIM115
        self._calls_out: IO[bytes] = open(self._calls_path, "ab")  # noqa: SIM115

    def extracted(self, user_id: str, turn_id: str) -> bool:
        return self._memory.extracted(user_id, turn_id)

    def mark_extracted(self, user_id: str, turn_ids: Iterable[str]) -> None:
        ids = list(turn_ids)
        self._memory.mark_extracted(user_id, ids)
        self._turns_out.write(orjson.dumps({"user": user_id, "turns": ids}) + b"\n")

    def add_call(self, call: ModelCall) -> None:
        self._memory.add_call(call)
        self._calls_out.write(orjson.dumps(call.to_json()) + b"\n")

    def calls(self) -> Iterator[ModelCall]:
        return self._memory.calls()

    def flush(self) -> None:
        for out in (self._turns_out, self._calls_out):
            out.flush()
            os.fsync(out.fileno())

    def close(self) -> None:
        for out in (self._turns_out, self._calls_out):
            if not out.closed:
                out.flush()
                out.close()


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line a crash left half-written, so appends start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        with open(path, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)


def _read(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise LogError(f"{path}:{number}: not valid JSON") from None
            if isinstance(data, dict):
                yield data
