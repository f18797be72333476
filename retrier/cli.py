"""`retrier [--dest NAME ...]` runs the global retrier; `retrier dlq list|replay` works on dead letters."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from hifi.cli import parse_time, run_daemon, run_daemon_command
from hifi.cli_options import (
    DaemonFlags,
    daemon_group,
    daemon_options,
    dests_option,
    group_option,
    subcommand_catalog_option,
)
from hifi.environment import AUDITOR_URL_ENV
from hifi.errors import ConfigError
from hifi.vocabulary import Reason
from retrier.dashboard.runbook import RUNBOOK_URL_ENV, runbook_base
from retrier.defaults import RETRIER_GROUP_ID

if TYPE_CHECKING:
    from config.destination import Destination
    from hifi.check import CheckReport
    from hifi.kafka.settings import KafkaSettings

PROG = "retrier"
F = TypeVar("F", bound=Callable[..., Any])


class _RunbookUrl(click.ParamType[str]):
    """Where docs/alerts.md is served: an http(s) URL without a #anchor; a bad one from the
    environment names the variable."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from_env = (
            ctx is not None
            and param is not None
            and param.name is not None
            and ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT
        )
        try:
            return runbook_base(str(value), option=f"${RUNBOOK_URL_ENV}" if from_env else "")
        except ConfigError as exc:
            self.fail(str(exc).strip(), param, ctx)


@daemon_group(PROG)
@dests_option("Serve")
@group_option(RETRIER_GROUP_ID)
@daemon_options(
    metrics_port=9401,
    metrics_help="Port for the dashboard (/), /metrics, /healthz, /readyz and /status"
    " (0 picks a free one).",
    idle_help="Exit cleanly once nothing arrived, waits or is in flight for this long.",
    probe_help="With --check: also reach Kafka and read the retention of the retry, DLQ and"
    " audit topics.",
)
@click.option(
    "--auditor-url",
    envvar=AUDITOR_URL_ENV,
    default=None,
    metavar="URL",
    help="The auditor's ops address ($HIFI_AUDITOR_URL): the dashboard shows its loss and lag"
    " and the destinations' health.",
)
@click.option(
    "--runbook-url",
    envvar=RUNBOOK_URL_ENV,
    type=_RunbookUrl(),
    default=None,
    metavar="URL",
    help="Where docs/alerts.md is served ($HIFI_RUNBOOK_URL; the base of the alerts'"
    " runbook_url): the dashboard's panels link their alerts' entries.",
)
@click.option(
    "--dashboard-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="PATH",
    help="File holding the dashboard token (else $HIFI_DASHBOARD_TOKEN); without one the"
    " dashboard is read-only.",
)
@click.option(
    "--dlq-index-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Where the dashboard's DLQ index keeps its search text (default: a temporary directory).",
)
def cli(
    dests: tuple[str, ...],
    group_id: str,
    flags: DaemonFlags,
    auditor_url: str | None,
    runbook_url: str | None,
    dashboard_token_file: Path | None,
    dlq_index_dir: Path | None,
) -> None:
    """Hold failed events for the delay of their retry tier, then offer them to the connector again.

    Reads hand-offs from NAME.retry_in (consumer group hifi.retrier, or --group). The first
    hand-off of an event waits retry_tiers_s[0] seconds in NAME.retry_tier0, the second
    retry_tiers_s[1] in NAME.retry_tier1, and so on; when due it is produced to NAME.retry_out, where the
    connector picks it up. After the last tier, or once older than max_retry_age_s since its
    first failure, it goes to NAME.dlq with hifi-reason expired.

    Offsets are committed only after the broker acknowledged what they led to, so a crash may
    re-offer an event twice but never loses one. Ordering of retried events is not
    guaranteed: events wait in different tiers and are re-offered as each becomes due.

    SIGTERM stops intake, finishes in-flight produces, commits and exits 0. Kafka is reached
    through HIFI_KAFKA_BOOTSTRAP and HIFI_KAFKA_*.
    """
    _serve(dests, group_id, flags, auditor_url, dashboard_token_file, dlq_index_dir, runbook_url)


def _serve(
    dests: tuple[str, ...],
    group_id: str,
    flags: DaemonFlags,
    auditor_url: str | None,
    dashboard_token_file: Path | None,
    dlq_index_dir: Path | None,
    runbook_url: str | None,
) -> None:
    """Load the destinations and run the retrier (or `--check` it) until a signal stops it."""
    import asyncio

    from config.daemon_start import load_daemon_inputs
    from retrier.daemon import DashboardOptions, Retrier
    from retrier.dashboard.access import read_token

    destinations, settings = load_daemon_inputs(flags, dests, flags.instance_id)
    if flags.check:
        asyncio.run(_check(destinations, settings, probe=flags.probe)).finish()
    retrier = Retrier(
        destinations,
        settings,
        group_id=group_id,
        **flags.ops(),
        dashboard=DashboardOptions(
            token=read_token(dashboard_token_file),
            auditor_url=auditor_url,
            index_dir=dlq_index_dir,
            runbook_url=runbook_url,
        ),
    )
    run_daemon(retrier.run, retrier.request_stop)


async def _check(dests: list[Destination], settings: KafkaSettings, *, probe: bool) -> CheckReport:
    """What the retrier would meet at start: its destinations, and with `probe` their topics."""
    from config.retry_age import tiers_warning
    from config.topics import audit_line, audit_retention_wanted, retention_wanted
    from hifi.check import CheckReport, probe_kafka
    from hifi.durations import for_people
    from retrier.tiers import tier_topic

    report = CheckReport(PROG)
    for dest in dests:
        tiers = ", ".join(for_people(s) for s in dest.retry_tiers_s)
        report.ok(
            f"destination {dest.name}: retry tiers {tiers};"
            f" expiry after {for_people(dest.max_retry_age_s)}"
        )
        if (warning := tiers_warning(dest)) is not None:
            report.warn(warning)
        report.ok(audit_line(dest))
    report.ok(f"kafka settings: bootstrap {settings.bootstrap}, {settings.security_protocol}")
    if probe:
        wanted: dict[str, int] = {}
        for dest in dests:
            tier_topics = [tier_topic(dest.name, k) for k in range(len(dest.retry_tiers_s))]
            wanted.update(retention_wanted(dest, tier_topics))
        wanted.update(audit_retention_wanted(dests))
        await probe_kafka(settings, report, source_topics=(), retention_wanted=wanted)
    return report


def dead_letters_options(verb: str) -> Callable[[F], F]:
    """`--dest NAME` and `--reason`: the dead letters a `dlq` command works on, those of NAME.dlq
    (`verb`: what it does to them), all or those of one dead-letter reason."""

    def decorate(function: F) -> F:
        with_reason = click.option(
            "--reason",
            type=click.Choice([reason.value for reason in Reason]),
            default=None,
            help="Only dead letters with this hifi-reason.",
        )(function)
        return click.option(
            "--dest", required=True, metavar="NAME", help=f"Destination whose NAME.dlq to {verb}."
        )(with_reason)

    return decorate


@cli.group()
def dlq() -> None:
    """Inspect and replay the dead letters of a destination (NAME.dlq)."""


@dlq.command("list")
@dead_letters_options("read")
@click.option(
    "--replayed/--not-replayed",
    default=None,
    help="Only dead letters replayed before, or only those never replayed (default: both).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Print at most this many, the most recent.",
)
@subcommand_catalog_option
def dlq_list(
    dest: str,
    reason: str | None,
    replayed: bool | None,
    limit: int,
    catalog: Path | None,
) -> None:
    """Print one line per dead letter, oldest first: reason, status, error, origin, age, the
    last replay (`replayed=TIME by WHO`, from NAME.dlq_replays) if any, body."""
    import asyncio

    from config.daemon_start import load_without_secrets
    from retrier.dlq import read_marked_letters, select_marked

    destination, settings = load_without_secrets(catalog, dest)
    letters, marks = asyncio.run(read_marked_letters(settings, destination, reason=reason))
    if replayed is not None:
        letters = select_marked(letters, marks, replayed=replayed)
    now_ms = int(time.time() * 1000)
    for letter in letters[-limit:]:
        click.echo(letter.describe(now_ms, marks.mark_of(letter.coordinate)))
    shown = f", the last {limit} shown" if len(letters) > limit else ""
    marked = len(select_marked(letters, marks, replayed=True))
    click.echo(
        f"{len(letters)} dead letters in {destination.dlq_topic}, {marked} replayed{shown}",
        err=True,
    )


@dlq.command("replay")
@dead_letters_options("replay")
@click.option(
    "--since",
    default=None,
    metavar="T",
    help="Only dead letters written since T: an ISO timestamp, or a duration ago (30m, 2h, 1d).",
)
@click.option("--again", is_flag=True, help="Replay letters replayed before too.")
@click.option(
    "--by",
    default=None,
    metavar="WHO",
    help="Who replays, recorded with the replay (default: the OS user).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be replayed; write nothing.")
@subcommand_catalog_option
def dlq_replay(
    dest: str,
    reason: str | None,
    since: str | None,
    again: bool,
    by: str | None,
    dry_run: bool,
    catalog: Path | None,
) -> None:
    """Re-inject dead letters into NAME.retry_out as fresh events (attempt count reset).

    They keep their origin, history and own headers; the connector delivers them as it does
    any retried event. Each replay is recorded in NAME.dlq_replays (which letters, when, by
    whom); letters replayed before are skipped unless --again.
    """
    import asyncio

    from config.daemon_start import load_without_secrets
    from retrier.dlq import plan_replay, read_marked_letters, replay
    from retrier.replays import ReplayFilter, checked_operator

    destination, settings = load_without_secrets(catalog, dest)
    since_ms = parse_time(since, now_ms=int(time.time() * 1000)) if since else None
    operator = checked_operator(by or _os_user())
    letters, marks = asyncio.run(
        read_marked_letters(settings, destination, reason=reason, since_ms=since_ms)
    )
    plan = plan_replay(letters, marks, again=again)
    route = f"from {destination.dlq_topic} into {destination.retry_out_topic}"
    skipped = f"skipped {len(plan.skipped)} dead letters replayed before (--again replays them)"
    if dry_run:
        click.echo(f"would replay {len(plan.letters)} dead letters {route} (dry run)")
        click.echo(skipped)
        return
    chosen = ReplayFilter(reason=reason, since_ms=since_ms, again=again)
    count = asyncio.run(replay(settings, destination, plan.letters, by=operator, filter=chosen))
    click.echo(f"replayed {count} dead letters {route}")
    click.echo(skipped)


def _os_user() -> str:
    """The operator's login name, or `uid N` where the system has none for the process."""
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"


def main() -> None:
    """The `retrier` command; a stop signal is caught and the allocators set from here on, before
    anything heavy loads."""
    run_daemon_command(cli, PROG)
