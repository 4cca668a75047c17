"""The ``uac`` command: ingest observations, read state, facts and alerts, query, replay, export.

Every command has ``--help``; reading commands have ``--json`` for programs.
Settings come from options or ``UAC_*`` environment variables (see ``uac.settings``).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict
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
from uac.cli_kafka import topics
from uac.cli_read import register
from uac.cli_worker import worker
from uac.domains.facts import iso
from uac.settings import Settings
from uac.streams.conversations import ExtractionSummary


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

    Conversation turns and observations go in (uac ingest); a model (any
    litellm model, or the built-in offline one) extracts typed facts from the
    turns; facts go on an append-only log, are folded into typed user state in
    checkpoint windows, and rules over that state raise alerts nobody had to ask
    for. Read it back exactly:

    \b
      uac ingest chat.jsonl              extract, append and fold (idempotent)
      uac ingest --format locomo 26.json a LoCoMo conversation, each speaker a user
      uac usage                          model calls, tokens and cost per user
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
@click.option("--format", "input_format", type=click.Choice(api.INPUT_FORMATS), default="jsonl",
              show_default=True, help="jsonl: observations, ticks and turns; locomo: a LoCoMo "
                                      "conversation file (each speaker a user).")
@click.option("--model", default=None, envvar="UAC_MODEL",
              help="The litellm model that extracts facts from turns (e.g. openai/gpt-4o-mini, "
                   "ollama/llama3, hosted_vllm/NAME). Default: the built-in offline model.")
@click.option("--api-base", default=None, envvar="UAC_API_BASE",
              help="Base URL of the model server (e.g. a local OpenAI-compatible one).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
@handle_errors
def ingest(ctx: click.Context, files: tuple[Path, ...], window_facts: int | None, strict: bool,
           metrics_file: Path | None, progress: bool, input_format: str, model: str | None,
           api_base: str | None, as_json: bool) -> None:
    """Append observations, or facts extracted from conversation turns, and fold them.

    \b
    One record per line (JSON Lines), any mix of:
      observation  {"user", "type", "attributes", "valid_time", "source_id"} and optional
                   "op" (assert|retract), "id", "observed_time", "confidence", "supersedes"
      turn         {"user", "conversation", "turn_id", "role" (user|assistant), "text",
                   "timestamp"} and optional "session"
      tick         {"tick": TIME} advances event time

    Turns are batched per user into windows (a session, 20 turns, 12,000 characters or 6
    hours, see UAC_EXTRACT_WINDOW_*), one model call per window. The model is any litellm
    model (--model / UAC_MODEL, with UAC_API_KEY and --api-base); without one, the built-in
    offline model runs: deterministic, no network, it understands only the plain
    first-person statements `uac offline` lists, e.g. "I'm allergic to penicillin", "I
    booked a trip to Tokyo from October 5 to October 19", "actually it's the 14th, not
    the 12th".

    Bad lines, answers that do not validate and calls that keep failing are reported,
    kept in the reject store (uac rejects) with their reason, and do not stop the rest.
    Re-ingesting adds nothing: facts have content ids and extracted turns are skipped.
    """
    settings = settings_of(ctx)
    updates: dict[str, object] = {}
    if window_facts:
        updates["window_facts"] = window_facts
    if model:
        updates["model"] = model
    if api_base:
        updates["api_base"] = api_base
    settings = settings.model_copy(update=updates) if updates else settings
    results = []
    for path in files:
        total = len(api.read_locomo(path)) if input_format == "locomo" else _count_lines(path)
        with progress_bar(f"ingest {path.name}", total, progress) as advance:
            results.append((path, api.ingest(path, settings=settings, progress=advance,
                                             metrics_file=metrics_file, format=input_format)))
    rejected = sum(r.rejected for _, r in results)
    if as_json:
        emit_json([{"file": str(p), **vars(r),
                    "extraction": asdict(r.extraction) if r.extraction else None}
                   for p, r in results])
    else:
        for path, r in results:
            click.echo(f"{path}: {r.lines} lines, {r.appended} new facts, {r.duplicates} "
                       f"already known, {r.rejected} rejected, {r.windows} windows, "
                       f"{r.raised} alerts raised, {r.resolved} resolved")
            if r.extraction is not None:
                _echo_extraction(r.extraction, settings.model_name)
            for error in r.errors:
                click.echo(f"  rejected {error}", err=True)
        if rejected:
            click.echo(f"{rejected} input(s) rejected; see `uac rejects`", err=True)
    if strict and rejected:
        sys.exit(3)


def _echo_extraction(x: ExtractionSummary, model: str) -> None:
    per = x.per_turn()
    click.echo(f"  extraction ({model}): {x.turns} turns ({x.turns_already_extracted} already "
               f"extracted), {x.windows} windows ({x.windows_failed} failed), {x.facts} facts; "
               f"{x.model_calls} model calls ({per['model_calls']:.2f}/turn), "
               f"{x.prompt_tokens:,} prompt tokens ({per['prompt_tokens']:.0f}/turn), "
               f"{x.completion_tokens:,} completion tokens, cost ${x.cost:.4f}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the forms as JSON.")
def offline(as_json: bool) -> None:
    """What the built-in offline model understands (it runs when no UAC_MODEL is set).

    A deterministic, rule-based extractor for demos and tests, registered as a litellm
    custom provider (uac-offline/rules-v1) so the same prompt, call, parse and validation
    run as with a hosted model. It reads only plain first-person statements of the forms
    below, with relative dates resolved against the turn's time, and skips negations,
    other people, questions, hypotheticals and text addressed to the extractor.
    """
    from uac.extraction.offline_rules import OFFLINE_FORMS

    if as_json:
        emit_json([{"domain": d, "example": e} for d, e in OFFLINE_FORMS])
        return
    for domain, example in OFFLINE_FORMS:
        click.echo(f"{domain:<12} {example}")


@main.command()
@click.argument("user", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the totals as JSON.")
@click.pass_context
@handle_errors
def usage(ctx: click.Context, user: str | None, as_json: bool) -> None:
    """Model use of extraction, per user and model: windows, calls, tokens, cost (litellm's).

    Failed windows count their calls too; see `uac rejects` for what they held.
    """
    totals = api.usage(settings=settings_of(ctx), user_id=user)
    if as_json:
        emit_json([{"user": u, "model": m, **asdict(t)} for (u, m), t in totals.items()])
        return
    if not totals:
        click.echo("no model calls recorded" + (f" for {user}" if user else ""))
        return
    click.echo(f"{'user':<24} {'model':<28} {'windows':>7} {'calls':>6} {'turns':>6} "
               f"{'prompt tok':>10} {'compl tok':>9} {'cost $':>9} {'failed':>6}")
    for (u, m), t in totals.items():
        click.echo(f"{u:<24} {m:<28} {t.windows:>7} {t.calls:>6} {t.turns:>6} "
                   f"{t.prompt_tokens:>10,} {t.completion_tokens:>9,} {t.cost:>9.4f} {t.failed:>6}")


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
main.add_command(topics)
main.add_command(worker)


if __name__ == "__main__":  # pragma: no cover
    main()
