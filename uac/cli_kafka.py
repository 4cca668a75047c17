"""The Kafka side of the ``uac`` command: ``uac topics create`` and ``uac topics verify``."""

from __future__ import annotations

import asyncio
import sys

import click

from uac.cli_common import emit_json, handle_errors, settings_of
from uac.streams.topics import TOPICS, TopicStatus, ensure_topics


@click.group()
def topics() -> None:
    """Create or verify uac's Kafka topics (uac.turns, uac.facts, ... uac.dlq).

    \b
    Every topic has the same partition count (co-partitioned by user);
    uac.facts and uac.state are compacted (retention -1), the others are
    deleted after their retention. Connection: --bootstrap or UAC_KAFKA_BOOTSTRAP.
    """


def _options(fn: click.decorators.FC) -> click.decorators.FC:
    fn = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(fn)
    fn = click.option("--prefix", default=None, help="Topic name prefix (UAC_TOPIC_PREFIX).")(fn)
    fn = click.option("--replication", type=click.IntRange(min=1), default=None,
                      help="Replication factor (UAC_KAFKA_REPLICATION, default 1).")(fn)
    fn = click.option("--partitions", type=click.IntRange(min=1), default=None,
                      help="Partitions per topic (UAC_KAFKA_PARTITIONS, default 8).")(fn)
    fn = click.option("--bootstrap", default=None,
                      help="Kafka bootstrap servers (UAC_KAFKA_BOOTSTRAP, default 127.0.0.1:9092).")(fn)
    return fn


def _run(ctx: click.Context, create: bool, bootstrap: str | None, partitions: int | None,
         replication: int | None, prefix: str | None, as_json: bool) -> None:
    s = settings_of(ctx)
    result = asyncio.run(ensure_topics(
        bootstrap or s.kafka_bootstrap, partitions=partitions or s.kafka_partitions,
        replication=replication or s.kafka_replication,
        prefix=s.topic_prefix if prefix is None else prefix, create=create))
    _report(result, as_json)
    if any(r.outcome == "mismatch" for r in result):
        sys.exit(4)


def _report(result: list[TopicStatus], as_json: bool) -> None:
    if as_json:
        emit_json([{"topic": r.topic, "outcome": r.outcome, "detail": r.detail} for r in result])
        return
    for r in result:
        click.echo(f"{r.topic:<28} {r.outcome:<9} {r.detail}".rstrip())


@topics.command()
@_options
@click.pass_context
@handle_errors
def create(ctx: click.Context, bootstrap: str | None, partitions: int | None,
           replication: int | None, prefix: str | None, as_json: bool) -> None:
    """Create the missing topics and verify the existing ones (exit 4 on a mismatch)."""
    _run(ctx, True, bootstrap, partitions, replication, prefix, as_json)


@topics.command()
@_options
@click.pass_context
@handle_errors
def verify(ctx: click.Context, bootstrap: str | None, partitions: int | None,
           replication: int | None, prefix: str | None, as_json: bool) -> None:
    """Check that every topic exists with the right partitions and configs (exit 4 if not)."""
    _run(ctx, False, bootstrap, partitions, replication, prefix, as_json)


@topics.command("list")
def list_topics() -> None:
    """The topics uac uses and what each carries."""
    for spec in TOPICS:
        kind = "compacted" if spec.compacted else f"retention {spec.retention_ms // 86_400_000} d"
        click.echo(f"{spec.name:<20} {kind:<16} {spec.doc}")
