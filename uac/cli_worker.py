"""``uac worker``: run a Kafka worker (a faust-streaming app) with the extraction agent."""

from __future__ import annotations

import click

from uac.cli_common import handle_errors
from uac.settings import Settings


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--bootstrap", default=None,
              help="Kafka bootstrap servers (UAC_KAFKA_BOOTSTRAP, default 127.0.0.1:9092).")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="Partitions of every uac topic (UAC_KAFKA_PARTITIONS, default 8); checked at start.")
@click.option("--prefix", default=None, help="Topic name prefix (UAC_TOPIC_PREFIX); also prefixes the "
                                             "consumer group, '<prefix>uac'.")
@click.option("--worker-id", default="w1", show_default=True, envvar="UAC_WORKER_ID",
              help="This worker's name (logs, /health, its faust data dir).")
@click.option("--port", "web_port", type=click.IntRange(0, 65535), default=6066, show_default=True,
              envvar="UAC_WORKER_PORT", help="Port of the web server (/health, /metrics).")
@click.option("--bind", "web_bind", default="127.0.0.1", show_default=True, envvar="UAC_WORKER_BIND",
              help="Address the web server listens on (0.0.0.0 in a container).")
@click.option("--advertise-url", default=None, envvar="UAC_WORKER_ADVERTISE_URL",
              help="The URL other workers reach this one's web server at, to forward queries for the "
                   "users of its partitions (default http://BIND:PORT, the host name for a wildcard "
                   "bind); distinct per worker.")
@click.option("--idle-timeout", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              envvar="UAC_WORKER_IDLE_TIMEOUT",
              help="Seconds without a new turn after which a user's open extraction window closes "
                   "(the end of the input, as far as the worker can tell).")
@click.option("--loglevel", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@click.option("--session-timeout", type=click.FloatRange(min=1.0), default=None,
              envvar="UAC_WORKER_SESSION_TIMEOUT",
              help="Seconds before the group gives a silent (killed) worker's partitions to the "
                   "others; lower is faster failover, higher tolerates longer pauses. Default: "
                   "faust's, 60 s.")
@click.option("--checkpoint/--no-checkpoint", default=False, envvar="UAC_WORKER_CHECKPOINT",
              help="Also run the checkpoint and constraint agent (uac.facts to uac.state, "
                   "uac.state-changes, uac.alerts) and the query side (/users/...).")
@click.option("--clock-tick", type=click.FloatRange(min=0), default=0.0, show_default=True,
              envvar="UAC_WORKER_CLOCK_TICK",
              help="Seconds between wall-clock ticks on uac.facts for the partitions this worker "
                   "folds (0: none). For live deployments: time-based rules (deadlines, expiries) "
                   "then fire as days pass even when no user writes. Event time otherwise comes "
                   "from the records alone. Needs --checkpoint.")
@click.pass_context
@handle_errors
def worker(ctx: click.Context, bootstrap: str | None, partitions: int | None, prefix: str | None,
           worker_id: str, web_port: int, web_bind: str, idle_timeout: float, loglevel: str,
           session_timeout: float | None, checkpoint: bool, advertise_url: str | None,
           clock_tick: float) -> None:
    """Run a Kafka worker of uac (a faust-streaming app): extraction, and with --checkpoint
    the checkpoint and constraint agent and the query side.

    \b
    It consumes (consumer group '<prefix>uac'; add workers to scale out by partition):
      uac.turns          conversation turns, windowed per user (session end, turn/char/span
                         limits of UAC_EXTRACT_WINDOW_*, or --idle-timeout); each closed window
                         is extracted by the model (UAC_MODEL; default the offline one)
      uac.observations   structured observations and clock ticks, validated
    and produces:
      uac.facts          facts (key user/fact_id) and ticks (key user/_tick/<time>)
      uac.dlq            what could not be processed (undecodable records, invalid
                         observations, model answers that do not validate), with the
                         reason and the source topic/partition/offset
    With --checkpoint it also folds uac.facts in windows and produces:
      uac.state          the entities (each with the facts it is folded from)
      uac.state-changes  one record per touched user per window
      uac.alerts         raised and resolved alerts of the built-in rules
    and a partition it gets is restored from uac.state and uac.alerts, then read on
    from the committed offset of uac.facts.
    A record's offset is committed only after its outputs were written (a turn's, once
    its window's facts are). Web: http://BIND:PORT/health and /metrics (Prometheus);
    with --checkpoint also /users/USER/state, /facts, /alerts and /query?sql=... (a
    user of another worker's partition is forwarded there).
    Stops cleanly on SIGTERM or Ctrl-C; topics must exist (uac topics create).
    """
    from uac.streams.worker import run_worker

    if clock_tick and not checkpoint:
        raise click.UsageError("--clock-tick needs --checkpoint (the ticks go to the partitions "
                               "this worker folds)")

    root = ctx.find_root().obj
    settings = root if isinstance(root, Settings) else Settings()
    overrides: dict[str, object] = {}
    if bootstrap is not None:
        overrides["kafka_bootstrap"] = bootstrap
    if partitions is not None:
        overrides["kafka_partitions"] = partitions
    if prefix is not None:
        overrides["topic_prefix"] = prefix
    if overrides:
        settings = Settings(**{**settings.model_dump(), **overrides})  # validated again
    run_worker(settings, worker_id, web_port, web_bind=web_bind, idle_timeout=idle_timeout,
               loglevel=loglevel, session_timeout=session_timeout, checkpoint=checkpoint,
               advertise_url=advertise_url, clock_tick=clock_tick)


if __name__ == "__main__":  # pragma: no cover
    worker()
