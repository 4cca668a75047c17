"""The exception hierarchy: one root, one subclass per area; errors carry data."""

from __future__ import annotations


class UacError(Exception):
    """Root of every error uac raises on purpose.

    ``retriable`` says whether the same call may succeed later unchanged
    (a busy store, a broker that is restarting), as aiokafka's errors do.
    """

    retriable: bool = False

    def __init__(self, message: str, *, step_id: str | None = None) -> None:
        super().__init__(message)
        self.step_id = step_id

    def __str__(self) -> str:
        base = super().__str__()
        return f"[{self.step_id}] {base}" if self.step_id else base


class ConfigError(UacError):
    """A setting is missing or has a value uac cannot use."""


class ValidationError(UacError):
    """Input (an observation, a fact, a record from a file) does not fit the domain."""

    def __init__(self, message: str, *, where: str | None = None, step_id: str | None = None):
        super().__init__(f"{where}: {message}" if where else message, step_id=step_id)
        self.reason = message
        self.where = where


class LogError(UacError):
    """The fact log cannot be read or written."""


class LogLockedError(LogError):
    """Another process holds the log's writer lock."""

    retriable = True


class StoreError(UacError):
    """The state store (the DuckDB view) cannot be read or written."""


class StoreBusyError(StoreError):
    """Another process holds the store; retry when it is done."""

    retriable = True


class QueryError(UacError):
    """A query was refused (not read-only, not allowed) or failed."""


class QueryTimeoutError(QueryError):
    """A query ran longer than its time limit and was stopped."""


class RuleError(UacError):
    """A rule crashed or returned something that is not a finding."""


class ExportError(UacError):
    """A user's memory could not be exported."""


class ExtractionError(UacError):
    """Turns could not be turned into facts (a bad turn, a model answer that does not validate)."""


class ModelError(ExtractionError):
    """A model call failed. ``retriable``: a timeout, a rate limit or a server error."""

    def __init__(self, message: str, *, retriable: bool, status: int | None = None,
                 step_id: str | None = None) -> None:
        super().__init__(message, step_id=step_id)
        self.retriable = retriable
        self.status = status


class BrokerError(UacError):
    """A test Kafka broker (uac.streams.testbroker) could not be started, reached or stopped."""


class CodecError(UacError):
    """Bytes that cannot be decoded (not Avro, wrong magic byte, unknown schema id, a body that
    does not parse) or a record that cannot be encoded; ``reason`` says what was wrong."""

    def __init__(self, reason: str, *, step_id: str | None = None) -> None:
        super().__init__(reason, step_id=step_id)
        self.reason = reason
