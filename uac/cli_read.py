"""The reading commands of ``uac`` (state, facts, alerts, query, ...), plus replay and demo."""

from __future__ import annotations

import shutil
import sys
from datetime import datetime
from pathlib import Path

import click

from uac import api
from uac.checkpointer.records import EntityRow
from uac.cli_common import (
    EXAMPLE,
    EXAMPLE_OBSERVATIONS,
    _time,
    emit_json,
    handle_errors,
    progress_bar,
    settings_of,
)
from uac.domains.catalog import entity_types
from uac.domains.facts import iso
from uac.executor.alerts import Alert, AlertStatus
from uac.render import alert_records, entity_records, fact_records, query_record
from uac.streams.codec import alert_to_dict

JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")


def format_alert(alert: Alert) -> str:
    mark = "OPEN" if alert.status is AlertStatus.OPEN else "resolved"
    lines = [f"[{mark}] {alert.severity.value.upper()} {alert.rule_id}: {alert.message}",
             f"    raised {iso(alert.raised_at)}"
             + (f", resolved {iso(alert.resolved_at)}" if alert.resolved_at else ""),
             f"    evidence: {', '.join(alert.evidence.entities)}",
             f"    facts: {', '.join(f[:12] for f in alert.evidence.fact_ids)}",
             f"    sources: {', '.join(alert.evidence.sources)}"]
    return "\n".join(lines)


def _print_state(user: str, rows: list[EntityRow]) -> None:
    if not rows:
        click.echo(f"{user}: nothing known")
        return
    current = None
    for row in rows:
        if row.entity_type != current:
            current = row.entity_type
            click.echo(f"{current}:")
        attrs = ", ".join(f"{k}={v}" for k, v in sorted(row.attributes.items()))
        click.echo(f"  {row.entity_id}: {attrs}")


@click.command()
@click.argument("user")
@click.option("--as-of", "known_at", callback=_time, default=None,
              help="What we believed at this time (observed time), e.g. 2025-03-01.")
@click.option("--valid-at", callback=_time, default=None,
              help="What was true in the world at this time (valid time).")
@JSON
@click.pass_context
@handle_errors
def state(ctx: click.Context, user: str, known_at: datetime | None, valid_at: datetime | None,
          as_json: bool) -> None:
    """What the memory knows about USER now (or as of a past time)."""
    rows = api.state(user, settings=settings_of(ctx), known_at=known_at, valid_at=valid_at)
    if as_json:
        emit_json(entity_records(rows))
    else:
        _print_state(user, rows)


@click.command()
@click.argument("user")
@click.option("--entity", default=None, metavar="TYPE[/ID]", help="Only this entity (or type).")
@JSON
@click.pass_context
@handle_errors
def facts(ctx: click.Context, user: str, entity: str | None, as_json: bool) -> None:
    """Every fact about USER: provenance, times, and status (current, overridden,
    superseded, retracted). Superseded values stay here: nothing is deleted."""
    views = api.facts(user, settings=settings_of(ctx))
    if entity:
        etype, _, eid = entity.partition("/")
        views = [v for v in views if v.fact.entity_type == etype
                 and (not eid or v.fact.entity_id == eid)]
    if as_json:
        emit_json(fact_records(views))
        return
    for v in views:
        f = v.fact
        attrs = ", ".join(f"{k}={val}" for k, val in f.attributes.items())
        click.echo(f"{f.fact_id[:12]} {v.status.value:<10} {f.op.value:<7} "
                   f"{f.entity_type}/{f.entity_id} {attrs}")
        click.echo(f"    valid {iso(f.valid_time)}  observed {iso(f.observed_time)}  "
                   f"from {', '.join(f.provenance)}"
                   + (f"  superseded by {', '.join(s[:12] for s in v.superseded_by)}"
                      if v.superseded_by else ""))


@click.command()
@click.argument("user")
@click.option("--status", type=click.Choice(["open", "resolved"]), default=None,
              help="Only open or only resolved alerts.")
@click.option("--history", is_flag=True, help="Every raise and resolution, in order.")
@JSON
@click.pass_context
@handle_errors
def alerts(ctx: click.Context, user: str, status: str | None, history: bool,
           as_json: bool) -> None:
    """USER's alerts, open and resolved, with evidence down to the source ids."""
    settings = settings_of(ctx)
    if history:
        events = api.alert_events(user, settings=settings)
        if as_json:
            emit_json([{"kind": e.kind.value, "at": iso(e.at), "alert": alert_to_dict(e.alert)}
                       for e in events])
        else:
            for e in events:
                click.echo(f"{iso(e.at)} {e.kind.value:<8} {e.alert.rule_id}: {e.alert.message}")
        return
    found = api.alerts(user, settings=settings,
                       status=AlertStatus(status) if status else None)
    if as_json:
        emit_json(alert_records(found))
    elif not found:
        click.echo(f"{user}: no alerts")
    else:
        click.echo("\n".join(format_alert(a) for a in found))


@click.command()
@click.argument("user")
@click.option("--sql", required=True, help="One read-only SELECT over the user's tables.")
@JSON
@click.pass_context
@handle_errors
def query(ctx: click.Context, user: str, sql: str, as_json: bool) -> None:
    """Answer a question about USER exactly, with SQL over typed tables.

    The query sees only USER's rows whatever it says. Tables: one per entity
    type (trips, medications, transactions, ... see `uac catalog`), plus
    entities, facts, alerts, alert_events, state_changes. A query still
    running after UAC_QUERY_TIMEOUT seconds (default 10) is stopped; one
    returning more than 100,000 rows is refused (aggregate, or add a LIMIT).

    \b
    Example: uac query alice --sql "SELECT count(*) FROM trips
             WHERE international AND year(start_date) = 2024"
    """
    result = api.query(user, sql, settings=settings_of(ctx))
    if as_json:
        emit_json(query_record(result))
        return
    click.echo("\t".join(result.columns))
    for row in result.rows:
        click.echo("\t".join("" if v is None else str(v) for v in row))


@click.command()
@click.option("--check", is_flag=True,
              help="Rebuild beside the current store and compare byte for byte (exit 1 if not).")
@click.option("--progress/--no-progress", default=False, help="Force the progress bar on.")
@JSON
@click.pass_context
@handle_errors
def replay(ctx: click.Context, check: bool, progress: bool, as_json: bool) -> None:
    """Rebuild state, alerts and the DuckDB view from the fact log alone (offset 0)."""
    settings = settings_of(ctx)
    from uac.streams.log import FileFactLog

    total = FileFactLog(settings.log_path, writer=False).end_offset()
    with progress_bar("replay", total, progress) as advance:
        result = api.replay(settings=settings, check=check, progress=advance)
    if as_json:
        emit_json(vars(result) if not hasattr(result, "__slots__") else
                  {k: getattr(result, k) for k in result.__slots__})
    else:
        click.echo(f"replayed {result.log_records} log records: {result.facts} facts, "
                   f"{result.windows} windows, {result.users} users in {result.seconds:.2f}s")
        if check:
            click.echo("replay matches the stored state" if result.matches else
                       "replay DIFFERS from the stored state")
    if check and not result.matches:
        sys.exit(1)


@click.command()
@JSON
@click.pass_context
@handle_errors
def users(ctx: click.Context, as_json: bool) -> None:
    """Every user the memory knows."""
    found = api.users(settings=settings_of(ctx))
    if as_json:
        emit_json(found)
    else:
        click.echo("\n".join(found))


@click.command()
@JSON
@click.pass_context
@handle_errors
def rejects(ctx: click.Context, as_json: bool) -> None:
    """Everything the pipeline refused: the step, where (file:line), why, and the input."""
    found = api.rejects(settings=settings_of(ctx))
    if as_json:
        emit_json([{"step_id": r.step_id, "source": r.source, "reason": r.reason,
                    "payload": r.payload} for r in found])
    else:
        for r in found:
            click.echo(f"[{r.step_id}] {r.source}: {r.reason}")


@click.command()
@JSON
def rules(as_json: bool) -> None:
    """The built-in rules: what each reads and whether clock ticks wake it."""
    from uac.streams.embedded import default_rules

    found = default_rules()
    if as_json:
        emit_json([{"rule_id": r.rule_id, "reads": sorted(r.reads), "time_based": r.time_based,
                    "description": r.description} for r in found])
        return
    for r in found:
        timed = " (time-based)" if r.time_based else ""
        click.echo(f"{r.rule_id}{timed}: {r.description}\n    reads {', '.join(sorted(r.reads))}")


@click.command()
@JSON
def catalog(as_json: bool) -> None:
    """The entity types, their fields and tables (what observations and queries use)."""
    types = entity_types()
    if as_json:
        emit_json([{"type": t.name, "domain": t.domain, "table": t.table, "key": list(t.key),
                    "description": t.description,
                    "fields": [{"name": f.name, "kind": f.kind, "unit": f.unit,
                                "description": f.description} for f in t.fields]}
                   for t in types])
        return
    for t in types:
        click.echo(f"{t.name} ({t.domain}, table {t.table}): {t.description}")
        for f in t.fields:
            unit = f" [{f.unit}]" if f.unit else ""
            click.echo(f"    {f.name}: {f.kind}{unit}  {f.description}")


@click.command()
@click.option("--user", default="maya", show_default=True, help="The example user.")
@click.option("--observations", is_flag=True,
              help="Ingest the same story as structured observations instead of a conversation.")
@click.pass_context
@handle_errors
def demo(ctx: click.Context, user: str, observations: bool) -> None:
    """Replay the bundled example into --data-dir (emptied first) and show what the memory
    knows and which alerts it raised.

    The example is seven months of one user's chat sessions (uac/examples/
    demo_conversation.jsonl): the extraction model (the offline one unless UAC_MODEL is
    set) turns them into facts, the fold makes state, rules raise and resolve alerts.
    --observations replays the same story as structured observations (demo.jsonl).
    """
    settings = settings_of(ctx)
    example = EXAMPLE_OBSERVATIONS if observations else EXAMPLE
    if settings.data_dir.exists():
        shutil.rmtree(settings.data_dir)
    click.echo(f"== ingest {example.name} into {settings.data_dir}")
    result = api.ingest(example, settings=settings)
    click.echo(f"{result.lines} lines, {result.appended} facts, {result.windows} windows, "
               f"{result.raised} alerts raised, {result.resolved} resolved")
    if result.extraction is not None:
        x = result.extraction
        click.echo(f"extraction ({settings.model_name}): {x.turns} turns in {x.windows} windows, "
                   f"{x.model_calls} model calls, {x.facts} facts")
    click.echo(f"\n== what the memory knows about {user}")
    _print_state(user, api.state(user, settings=settings))
    click.echo(f"\n== alert history of {user}")
    for e in api.alert_events(user, settings=settings):
        click.echo(f"{iso(e.at)} {e.kind.value:<8} {e.alert.rule_id}: {e.alert.message}")
    click.echo(f"\n== alerts of {user}, with evidence")
    click.echo("\n".join(format_alert(a) for a in api.alerts(user, settings=settings)))


def register(group: click.Group) -> None:
    for command in (state, facts, alerts, query, replay, users, rejects, rules, catalog, demo):
        group.add_command(command)
    from uac.export.cli import export

    group.add_command(export)


__all__ = ["Path", "register"]
