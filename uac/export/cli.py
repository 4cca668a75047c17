"""The ``uac export`` command (registered on the ``uac`` group by ``uac.cli_read``)."""

from __future__ import annotations

from pathlib import Path

import click

from uac.cli_common import emit_json, handle_errors, progress_bar, settings_of
from uac.domains.facts import iso
from uac.export.exporter import ExportSummary, export_all, export_user
from uac.export.snapshot import list_users


def _describe(summary: ExportSummary) -> str:
    return (f"exported {summary.user_id} to {summary.directory}: {summary.entities} entities, "
            f"{summary.rules} rules, {summary.open_alerts} open alert(s), "
            f"state version {summary.state_version}, event time {iso(summary.exported_at)}")


def _warn(summary: ExportSummary) -> None:
    if not summary.matches_store:
        click.echo(f"warning: {summary.user_id}: the exported rules at the export's event time "
                   "do not raise exactly the store's open alerts (see manifest.OPEN_ALERTS)",
                   err=True)
    for failure in summary.rule_failures:
        click.echo(f"warning: {summary.user_id}: rule {failure}", err=True)


@click.command()
@click.argument("targets", nargs=-1, required=True, metavar="USER DIR | --all DIR")
@click.option("--all", "all_users", is_flag=True,
              help="Export every user, each into DIR/<user>/ (plus DIR/users.json).")
@click.option("--force", is_flag=True, help="Write into a non-empty DIR, overwriting the "
              "exported files (other files are left alone).")
@click.option("--progress/--no-progress", default=False, help="Force the progress bar on.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
@click.pass_context
@handle_errors
def export(ctx: click.Context, targets: tuple[str, ...], all_users: bool, force: bool,
           progress: bool, as_json: bool) -> None:
    """Write USER's memory into DIR as a self-contained Python project.

    DIR gets manifest.py (a compact index), domains/ (typed dataclasses and the
    user's state), constraints/ (the rules, with a tiny runtime), runner.py and
    tests/. It runs with plain Python and pytest, without uac:

    \b
      uac export alice ./alice && cd alice
      python runner.py          # the open alerts, as `uac alerts alice --status open`
      python -m pytest
    """
    settings = settings_of(ctx)
    expected = 1 if all_users else 2
    if len(targets) != expected:
        raise click.UsageError("expected --all DIR" if all_users else "expected USER DIR "
                               "(or --all DIR)")
    if all_users:
        total = len(list_users(settings=settings))
        with progress_bar("export", total, progress) as advance:
            summaries = export_all(Path(targets[0]), settings=settings, force=force,
                                   progress=advance)
    else:
        summaries = [export_user(targets[0], Path(targets[1]), settings=settings, force=force)]
    if as_json:
        emit_json([s.to_dict() for s in summaries] if all_users else summaries[0].to_dict())
    else:
        for summary in summaries:
            click.echo(_describe(summary))
    for summary in summaries:
        _warn(summary)
