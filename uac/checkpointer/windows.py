"""Window policy: where the log is cut into checkpoint windows. Pure: no I/O.

The writer of the log decides window boundaries (by fact count or event-time
span) and records them as :class:`~uac.domains.facts.WindowMark` records, so
every reader of the log, a replay included, folds exactly the same windows.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from uac.domains.facts import Fact, LogRecord, Tick, WindowMark


class WindowPolicy:
    """Close a window after ``max_facts`` facts or once it spans ``max_span`` of event time."""

    def __init__(self, max_facts: int = 1000, max_span: timedelta = timedelta(days=1)) -> None:
        if max_facts < 1:
            raise ValueError("max_facts must be at least 1")
        self.max_facts = max_facts
        self.max_span = max_span
        self.count = 0
        self.first: datetime | None = None

    def closes_before(self, record: LogRecord) -> str | None:
        """Return a reason to close the open window *before* ``record`` (its event time
        is ``max_span`` or more away from the window's first fact, or it is a tick), or None."""
        if isinstance(record, Tick) and self.open:
            self.reset()
            return "tick"
        if (isinstance(record, Fact) and self.first is not None
                and abs(record.observed_time - self.first) >= self.max_span):
            self.reset()
            return "span"
        return None

    def closes_after(self, record: LogRecord) -> str | None:
        """Feed one record; return a reason to close the window after it (size, tick), or None."""
        if isinstance(record, Tick):
            self.reset()
            return "tick"
        if not isinstance(record, Fact):
            return None
        self.count += 1
        if self.first is None:
            self.first = record.observed_time
        if self.count >= self.max_facts:
            self.reset()
            return "size"
        return None

    def reset(self) -> None:
        self.count = 0
        self.first = None

    @property
    def open(self) -> bool:
        return self.count > 0


def with_marks(policy: WindowPolicy, record: Fact | Tick, next_window: int
               ) -> tuple[list[LogRecord], int]:
    """``record`` as the log's writer appends it: with a window mark before and/or after it where
    ``policy`` closes a window; and the id the next mark gets. Every writer (the embedded pipeline,
    the Kafka worker) cuts windows through this one function."""
    out: list[LogRecord] = []
    before = policy.closes_before(record)
    if before is not None:
        out.append(WindowMark(next_window, reason=before))
        next_window += 1
    out.append(record)
    after = policy.closes_after(record)
    if after is not None:
        out.append(WindowMark(next_window, reason=after))
        next_window += 1
    return out, next_window
