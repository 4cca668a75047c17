"""Helpers shared by the ``uac`` commands: JSON output, error handling, progress bars."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from uac.domains.facts import to_utc
from uac.errors import UacError
from uac.render import dumps
from uac.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])
EXAMPLE = Path(__file__).parent / "examples" / "demo_conversation.jsonl"
EXAMPLE_OBSERVATIONS = Path(__file__).parent / "examples" / "demo.jsonl"


def emit_json(data: Any) -> None:
    click.echo(dumps(data).decode())


def _time(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return to_utc(value)
    except ValueError:
        raise click.BadParameter(f"not an ISO 8601 date or time: {value!r}") from None


def handle_errors(fn: F) -> F:
    """Turn uac errors into one clear line on stderr and exit status 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UacError as exc:
            hint = " (this is temporary: retry)" if exc.retriable else ""
            click.echo(f"uac: error: {exc}{hint}", err=True)
            sys.exit(1)
        except FileNotFoundError as exc:
            click.echo(f"uac: error: no such file: {exc.filename}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@contextmanager
def progress_bar(label: str, total: int | None, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal (or ``enabled``); else a no-op."""
    if not (enabled or sys.stderr.isatty()):
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


def settings_of(ctx: click.Context) -> Settings:
    """The Settings the ``uac`` group built from its options and the environment."""
    settings = ctx.find_root().obj
    assert isinstance(settings, Settings)
    return settings
