"""`connector --dest NAME` runs the egest daemon; `connector rewind|backfill` deliver a time range again."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from connector.defaults import CHECKPOINT_EVERY_RECORDS, CHECKPOINT_EVERY_S, MAX_RATE_PER_S
from hifi.cli import parse_time, run_daemon, run_daemon_command
from hifi.cli_options import (
    INSTANCE_ID_FROM,
    DaemonFlags,
    daemon_group,
    daemon_options,
    subcommand_catalog_option,
)
from hifi.errors import CommandFailed, ConfigError, HifiError

if TYPE_CHECKING:
    from config.destination import Destination
    from connector.backfill.reoffer import BackfillRequest, BackfillResult
    from hifi.kafka.settings import KafkaSettings

PROG = "connector"
_TIME_HELP = "ISO 8601 (2026-01-31T08:00:00Z; UTC unless it says) or a duration ago (30m, 2h, 1d)."


@daemon_group(PROG)
@click.option("--dest", metavar="NAME", help="Destination name: the file NAME.toml in the catalog.")
@daemon_options(
    metrics_port=9400,
    metrics_help="Port for /metrics, /healthz and /readyz (0 picks a free one).",
    idle_help="Exit cleanly once no record has arrived for this long.",
    probe_help="With --check: also reach Kafka (topics, retention), the tenant entries and the"
    " destination (TCP, TLS and a HEAD request; never a POST unless --probe-post).",
    probe_implied_by=("probe_post",),
)
@click.option(
    "--probe-post",
    is_flag=True,
    help="--probe, and also POST one empty batch (an empty JSON array, or an empty NDJSON"
    " body) to the destination, as a delivery would; 401/403 or 404/405 then exit 2.",
)
@click.option(
    "--tenant",
    metavar="T",
    default=None,
    help="With --probe: probe the url and headers rendered from tenant T's entry (a"
    " destination with [lookups] whose url has {tenant}; --probe-post needs it).",
)
@click.pass_context
def cli(
    ctx: click.Context,
    dest: str | None,
    probe_post: bool,
    tenant: str | None,
    flags: DaemonFlags,
) -> None:
    """Deliver the events of destination NAME from Kafka to its HTTP endpoint.

    Offsets are committed only once every record before them is delivered, handed to the
    retrier (NAME.retry_in) or dead-lettered (NAME.dlq). SIGTERM drains in-flight requests,
    commits and exits 0. Kafka is reached through HIFI_KAFKA_BOOTSTRAP and HIFI_KAFKA_*.

    `connector rewind` and `connector backfill` deliver a time range of a destination's
    source records again (docs/backfill.md).
    """
    if dest is None:
        raise click.MissingParameter(ctx=ctx, param=_param(ctx, "dest"))
    if tenant is not None and not flags.probe:
        raise ConfigError(f"--tenant {tenant!r}: only with --probe or --probe-post")
    _serve(dest, flags, probe_post=probe_post, tenant=tenant)


def _serve(name: str, flags: DaemonFlags, *, probe_post: bool, tenant: str | None) -> None:
    """Load destination `name` and run its connector (or `--check` it) until a signal stops it."""
    import asyncio

    from config.catalog import Catalog, default_catalog_dir
    from connector.check import Probe, check
    from connector.daemon import Connector
    from hifi.kafka.settings import KafkaSettings
    from hifi.lookup_cache.redis_hash import RedisSettings

    destination = Catalog(flags.catalog or default_catalog_dir()).load(name)
    settings = KafkaSettings.from_env().as_static_member(flags.instance_id, where=INSTANCE_ID_FROM)
    redis = RedisSettings.from_env() if destination.lookups is not None else None
    probe = Probe(flags.probe, post=probe_post, tenant=tenant)
    if flags.check:
        asyncio.run(check(destination, settings, probe=probe, redis=redis)).finish()
    connector = Connector(destination, settings, **flags.ops(), redis=redis)
    run_daemon(connector.run, connector.request_stop)


@cli.command()
@click.option("--dest", required=True, metavar="NAME", help="Destination whose connector to move.")
@click.option(
    "--to", "to_text", required=True, metavar="TIME", help="Where to move to: " + _TIME_HELP
)
@click.option("--dry-run", is_flag=True, help="Print what would move; change nothing.")
@subcommand_catalog_option
def rewind(dest: str, to_text: str, dry_run: bool, catalog: Path | None) -> None:
    """Move the connector's committed offsets to the first record at or after TIME.

    Per partition of the source topics, the group hifi.connector.NAME is set to the first
    record whose timestamp is at or after TIME (the end of the partition when there is none);
    the connector, started again, delivers from there. Prints per partition the committed
    offset now, the offset after, and the records delivered again. Refuses while the group has
    active members: stop the connector first.
    """
    import asyncio

    from config.daemon_start import load_without_secrets
    from connector.backfill import views
    from connector.backfill.rewind import RewindPlan, check_idle, commit_rewind, plan_rewind

    destination, settings = load_without_secrets(catalog, dest)
    to_ms = _time(to_text, "--to")

    async def work() -> RewindPlan:
        plan = await plan_rewind(settings, destination, to_ms)
        if not dry_run:
            check_idle(plan.group, destination)
            await commit_rewind(settings, plan)
        return plan

    plan = asyncio.run(work())
    views.console().print(views.rewind_table(plan, dry_run=dry_run))
    if dry_run and plan.group.active:
        click.echo(
            f"note: group {plan.group.group_id} has {plan.group.members} active members;"
            " rewind refuses to move it until they stop",
            err=True,
        )


@cli.command()
@click.option("--dest", required=True, metavar="NAME", help="Destination to backfill.")
@click.option("--from", "from_text", required=True, metavar="TIME", help="From TIME: " + _TIME_HELP)
@click.option(
    "--to",
    "to_text",
    required=True,
    metavar="TIME",
    help="Until TIME (not included): " + _TIME_HELP,
)
@click.option(
    "--only-missing",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PATH",
    help="Only the events listed for NAME in this missing-events Parquet file or directory.",
)
@click.option(
    "--rate",
    "rate_per_s",
    type=click.FloatRange(min=0, min_open=True, max=MAX_RATE_PER_S),
    default=None,
    metavar="EVENTS_PER_S",
    help="Re-offer at most this many events a second (default: as fast as the broker acknowledges).",
)
@click.option("--dry-run", is_flag=True, help="Scan and count per partition; write nothing.")
@click.option(
    "--checkpoint",
    "checkpoint_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="Checkpoint file (default: under $HIFI_STATE_DIR, named after NAME, range and selection).",
)
@click.option(
    "--checkpoint-every",
    "checkpoint_every_s",
    type=click.FloatRange(min=0, min_open=True, max=CHECKPOINT_EVERY_S),
    default=CHECKPOINT_EVERY_S,
    show_default=True,
    metavar="SECONDS",
    help="Write the checkpoint at least this often (and every"
    f" {CHECKPOINT_EVERY_RECORDS:,} records scanned).",
)
@click.option("--restart", is_flag=True, help="Start over, replacing this backfill's checkpoint.")
@subcommand_catalog_option
def backfill(
    dest: str,
    from_text: str,
    to_text: str,
    only_missing: Path | None,
    rate_per_s: float | None,
    dry_run: bool,
    checkpoint_file: Path | None,
    checkpoint_every_s: float,
    restart: bool,
    catalog: Path | None,
) -> None:
    """Re-offer the source records of a time range on NAME.retry_out, where the connector takes them.

    Each source partition is read from the first record at or after FROM to the first record at
    or after TO (or to its end when the backfill began). Every record in range, or with
    --only-missing only those listed there for NAME, is written to NAME.retry_out with its key
    and value and the headers of a fresh re-offer: the running connector delivers it with its
    original id and origin. Progress is checkpointed after the broker acknowledged it; the same
    command started again resumes there, and does nothing once the backfill has finished.
    SIGTERM or Ctrl-C stops after the write in flight and saves the checkpoint.
    """
    from config.daemon_start import load_without_secrets

    destination, settings = load_without_secrets(catalog, dest)
    request = _backfill_request(
        destination,
        (from_text, to_text),
        only_missing,
        checkpoint_file,
        rate_per_s=rate_per_s,
        checkpoint_every_s=checkpoint_every_s,
        restart=restart,
        dry_run=dry_run,
    )
    if not dry_run:
        click.echo(f"checkpoint: {request.checkpoint_path}", err=True)
    _report(request, _run_backfill(settings, request))


def _backfill_request(
    destination: Destination,
    span: tuple[str, str],
    only_missing: Path | None,
    checkpoint_file: Path | None,
    *,
    rate_per_s: float | None,
    checkpoint_every_s: float,
    restart: bool,
    dry_run: bool,
) -> BackfillRequest:
    """The backfill the flags describe: its range, its selection and its checkpoint file."""
    from connector.backfill import checkpoint as checkpoints
    from connector.backfill.reoffer import BackfillRequest, backfill_key, time_key
    from connector.backfill.selection import Selection, read_missing

    from_text, to_text = span
    from_ms, to_ms = _time(from_text, "--from"), _time(to_text, "--to")
    if from_ms >= to_ms:
        raise ConfigError(f"--from {from_text!r} is not before --to {to_text!r}; give FROM < TO")
    selection = (
        read_missing(only_missing, destination.name) if only_missing else Selection.everything()
    )
    key = backfill_key(
        destination.name,
        time_key(from_text, flag="--from"),
        time_key(to_text, flag="--to"),
        selection.digest,
    )
    return BackfillRequest(
        destination,
        from_ms,
        to_ms,
        key,
        selection,
        checkpoint_file or checkpoints.default_path(destination.name, key),
        rate_per_s=rate_per_s,
        checkpoint_every_s=checkpoint_every_s,
        restart=restart,
        dry_run=dry_run,
    )


def _run_backfill(settings: KafkaSettings, request: BackfillRequest) -> BackfillResult:
    """Run the backfill; a failure says where the acknowledged progress is saved."""
    import asyncio

    try:
        return asyncio.run(_backfill(settings, request))
    except ConfigError:
        raise
    except (HifiError, TimeoutError) as exc:
        resume = (
            f"; what the broker acknowledged is saved in {request.checkpoint_path}:"
            " run the same command again to resume"
            if not request.dry_run and request.checkpoint_path.exists()
            else ""
        )
        raise CommandFailed(f"{exc or 'timed out'}{resume}") from exc


async def _backfill(settings: KafkaSettings, request: BackfillRequest) -> BackfillResult:
    """Prepare and run one backfill; SIGTERM and SIGINT stop it at the next write."""
    import asyncio

    from connector.backfill import views
    from connector.backfill.reoffer import Backfill

    job = Backfill(settings, request)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, job.request_stop, sig.name)
    state = await job.prepare()
    if job.resumed and not state.finished:
        scanned, _, reoffered = state.totals()
        click.echo(
            f"resuming from the checkpoint: {scanned} scanned, {reoffered} re-offered so far",
            err=True,
        )
    with views.progress(state) as show:
        return await job.run(show)


def _report(request: BackfillRequest, result: BackfillResult) -> None:
    """The per-partition table and the totals; a stopped backfill ends in one line, exit 1."""
    from connector.backfill import views
    from connector.backfill.reoffer import Status

    state = result.state
    span = f"{state.dest} from {views.iso_ms(state.from_ms)} to {views.iso_ms(state.to_ms)}"
    scanned, selected, reoffered = state.totals()
    if result.status is Status.ALREADY_FINISHED:
        click.echo(
            f"backfill of {span} already finished ({reoffered} re-offered); nothing to do"
            " (--restart runs it again)"
        )
        return
    views.console().print(views.backfill_table(state, dry_run=request.dry_run))
    if result.status is Status.STOPPED:
        raise CommandFailed(
            f"stopped by {result.stopped_by or 'request'} after {reoffered} of the"
            f" {selected} selected so far were re-offered; progress is saved in"
            f" {request.checkpoint_path}: run the same command again to resume"
        )
    listed = (
        f"; {state.listed} listed for {state.dest}, {selected} of them in range"
        if state.listed is not None
        else ""
    )
    if request.dry_run:
        click.echo(f"dry run of {span}: scanned {scanned}, selected {selected}{listed}")
        return
    resumed = f" (this run: {result.reoffered_now})" if result.resumed else ""
    click.echo(
        f"backfilled {span}: scanned {scanned}, selected {selected}, re-offered {reoffered}"
        f"{resumed} in {result.run_s:.2f} s{listed}"
    )


def _param(ctx: click.Context, name: str) -> click.Parameter:
    return next(param for param in ctx.command.params if param.name == name)


def _time(text: str, flag: str) -> int:
    return parse_time(text, now_ms=int(time.time() * 1000), flag=flag)


def main() -> None:
    """The `connector` command; a stop signal is caught and the allocators set from here on, before
    anything heavy loads."""
    run_daemon_command(cli, PROG)
