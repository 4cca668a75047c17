"""The ``uac`` command: ingest observations, read state, facts and alerts, query, replay, export.

Every command has ``--help``; reading commands have ``--json`` for programs.
Settings come from options or ``UAC_*`` environment variables (see ``uac.settings``).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from uac import api
from uac.cli_common import (
    _count_lines,
    _time,
    emit_json,
    handle_errors,
    progress_bar,
    settings_of,
)
from uac.cli_read import register
from uac.domains.facts import iso
from uac.settings import Settings


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


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--window-facts", type=click.IntRange(min=1), default=None,
              help="Close a checkpoint window after this many facts (default 1000).")
@click.option("--strict", is_flag=True, help="Exit with status 3 if any line was rejected.")
@click.option("--metrics-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write this run's Prometheus metrics (text format) to this file.")
@click.option("--progress/--no-progress", default=False, help="Force the progress bar on.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
@handle_errors
def ingest(ctx: click.Context, files: tuple[Path, ...], window_facts: int | None, strict: bool,
           metrics_file: Path | None, progress: bool, as_json: bool) -> None:
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
            results.append((path, api.ingest(path, settings=settings, progress=advance,
                                             metrics_file=metrics_file)))
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


register(main)


if __name__ == "__main__":  # pragma: no cover
    main()
