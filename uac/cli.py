"""The ``uac`` command: ingest observations, read state, facts and alerts, query, replay, export.

Every command has ``--help``; reading commands have ``--json`` for programs.
Settings come from options or ``UAC_*`` environment variables (see ``uac.settings``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from uac import api
from uac.domains.facts import iso, to_utc
from uac.errors import UacError
from uac.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])
EXAMPLE = Path(__file__).parent / "examples" / "demo.jsonl"


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def emit_json(data: Any) -> None:
    click.echo(orjson.dumps(data, default=_default, option=orjson.OPT_INDENT_2
                            | orjson.OPT_NON_STR_KEYS).decode())


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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--data-dir", type=click.Path(path_type=Path), envvar="UAC_DATA_DIR",
              default=Path(".uac"), show_default=True,
              help="Where the memory lives: the fact log, the state store, the rejects.")
@click.option("--wait", "lock_timeout", type=float, envvar="UAC_LOCK_TIMEOUT", default=30.0,
              show_default=True, help="Seconds to wait for a store another uac process holds.")
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
@click.pass_context
def main(ctx: click.Context, data_dir: Path, lock_timeout: float, verbose: int) -> None:
    """uac: executable memory for personalized AI agents.

    Observations go in (uac ingest); they become facts on an append-only log,
    are folded into typed user state in checkpoint windows, and rules over that
    state raise alerts nobody had to ask for. Read it back exactly:

    \b
      uac ingest observations.jsonl      append and fold (idempotent)
      uac state alice                    what the memory knows now
      uac facts alice                    every fact, its provenance and status
      uac alerts alice                   open and resolved alerts, with evidence
      uac query alice --sql "SELECT count(*) FROM trips WHERE international"
      uac replay --check                 rebuild from the log and compare
      uac export alice ./alice           the user as a Python project

    Try `make demo` (or `uac demo`) for a worked example.
    """
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        ctx.obj = Settings(data_dir=data_dir, lock_timeout=lock_timeout)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def settings_of(ctx: click.Context) -> Settings:
    settings = ctx.obj
    assert isinstance(settings, Settings)
    return settings


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--window-facts", type=click.IntRange(min=1), default=None,
              help="Close a checkpoint window after this many facts (default 1000).")
@click.option("--strict", is_flag=True, help="Exit with status 3 if any line was rejected.")
@click.option("--progress/--no-progress", default=False, help="Force the progress bar on.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
@handle_errors
def ingest(ctx: click.Context, files: tuple[Path, ...], window_facts: int | None, strict: bool,
           progress: bool, as_json: bool) -> None:
    """Append observations from JSON Lines FILES and fold them into state.

    One observation per line: {"user", "type", "attributes", "valid_time",
    "source_id"} plus optional "op" (assert|retract), "id", "observed_time",
    "confidence", "supersedes". A line {"tick": TIME} advances event time.
    Bad lines are reported with file:line and reason, kept in the reject store
    (uac rejects), and do not stop the good ones. Re-ingesting adds nothing.
    """
    settings = settings_of(ctx)
    if window_facts:
        settings = settings.model_copy(update={"window_facts": window_facts})
    results = []
    for path in files:
        total = _count_lines(path)
        with progress_bar(f"ingest {path.name}", total, progress) as advance:
            results.append((path, api.ingest(path, settings=settings, progress=advance)))
    rejected = sum(r.rejected for _, r in results)
    if as_json:
        emit_json([{"file": str(p), **vars(r)} for p, r in results])
    else:
        for path, r in results:
            click.echo(f"{path}: {r.lines} lines, {r.appended} new facts, {r.duplicates} "
                       f"already known, {r.rejected} rejected, {r.windows} windows, "
                       f"{r.raised} alerts raised, {r.resolved} resolved")
            for error in r.errors:
                click.echo(f"  rejected {error}", err=True)
        if rejected:
            click.echo(f"{rejected} line(s) rejected; see `uac rejects`", err=True)
    if strict and rejected:
        sys.exit(3)


@main.command()
@click.option("--at", "at", callback=_time, default=None,
              help="Event time to advance to (default: now, by the wall clock).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def tick(ctx: click.Context, at: datetime | None, as_json: bool) -> None:
    """Advance event time so time-based rules (deadlines, return windows) run.

    Live deployments run this from a scheduler (e.g. daily); the tick is
    recorded in the log, so a replay raises the same alerts.
    """
    when = at or datetime.now(UTC)
    result = api.tick(when, settings=settings_of(ctx))
    if as_json:
        emit_json(vars(result))
    else:
        click.echo(f"tick {iso(when)}: {result.raised} alerts raised, {result.resolved} resolved"
                   + ("" if result.ticks else " (event time was already past it)"))


from uac.cli_read import register  # noqa: E402  (the reading commands live beside)

register(main)


if __name__ == "__main__":  # pragma: no cover
    main()
