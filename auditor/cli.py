"""`auditor [--dest NAME ...]` runs the auditor; `auditor report` prints its per-minute tables and availability."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from auditor.defaults import DEFAULT_ROLL_S, GROUP_ID
from hifi.accounting.buckets import MINUTE_MS
from hifi.cli import parse_time, run_daemon, run_daemon_command
from hifi.cli_options import (
    FINITE_POSITIVE_SECONDS,
    DaemonFlags,
    daemon_group,
    daemon_options,
    dests_option,
    group_option,
)
from hifi.durations import for_people
from hifi.errors import ConfigError, HifiError

if TYPE_CHECKING:
    from rich.console import Console

    from config.destination import Destination
    from hifi.accounting.client import AuditorTables
    from hifi.check import CheckReport
    from hifi.kafka.settings import KafkaSettings

PROG = "auditor"
ARCHIVE_ENV_VAR = "HIFI_ARCHIVE_DIR"
DEFAULT_ARCHIVE = "hifi-archive"


def _archive_default() -> Path:
    return Path(os.environ.get(ARCHIVE_ENV_VAR) or DEFAULT_ARCHIVE)


@daemon_group(PROG)
@dests_option("Audit")
@click.option(
    "--archive",
    "archive_dir",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Archive directory (default: ${ARCHIVE_ENV_VAR}, else ./{DEFAULT_ARCHIVE}).",
)
@group_option(GROUP_ID)
@click.option(
    "--archive-roll-s",
    "roll_s",
    type=FINITE_POSITIVE_SECONDS,
    default=DEFAULT_ROLL_S,
    show_default=True,
    help="Close the archive files (and commit offsets) at least this often.",
)
@daemon_options(
    metrics_port=9402,
    metrics_help="Port for /metrics, /healthz, /readyz, /status and /tables (0 picks a free one).",
    idle_help="Exit cleanly once nothing arrived or waits to be written for this long.",
    probe_help="With --check: also reach Kafka: the source topics and the audit topic's retention.",
)
def cli(
    dests: tuple[str, ...],
    archive_dir: Path | None,
    group_id: str,
    roll_s: float,
    flags: DaemonFlags,
) -> None:
    """Account for every event of some destinations: per-minute loss tables, lag, availability.

    Reads each destination's source_topics in its own consumer group (hifi.auditor) and the
    audit facts the connector and the retrier write to hifi.audit ($HIFI_AUDIT_TOPIC). Per
    destination and event-time minute (UTC) it counts what entered, was delivered,
    dead-lettered, filtered, is in retry or is missing, with the end-to-end lag percentiles;
    a minute is final settle_s after it ends ([accounting] in the catalog file). Rows and
    facts go to Parquet files in the archive; offsets are committed only once they are in
    closed files. SIGTERM finishes the roll in progress, commits and exits 0.
    """
    _serve(dests, archive_dir or _archive_default(), group_id, roll_s, flags)


def _serve(
    dests: tuple[str, ...], archive: Path, group_id: str, roll_s: float, flags: DaemonFlags
) -> None:
    """Load the destinations and run the auditor (or `--check` it) until a signal stops it."""
    import asyncio

    from auditor.daemon import Auditor
    from config.daemon_start import load_daemon_inputs

    destinations, settings = load_daemon_inputs(flags, dests, flags.instance_id)
    if flags.check:
        report = _check(destinations, settings, archive_dir=archive, probe=flags.probe)
        asyncio.run(report).finish()
    auditor = Auditor(
        destinations,
        settings,
        archive_dir=archive,
        roll_s=roll_s,
        group_id=group_id,
        **flags.ops(),
    )
    run_daemon(auditor.run, auditor.request_stop)


async def _check(
    destinations: list[Destination], settings: KafkaSettings, *, archive_dir: Path, probe: bool
) -> CheckReport:
    """What the auditor would meet at start: its destinations' accounting settings, the
    archive, and with `probe` Kafka, the source topics and the audit topic's retention."""
    from hifi.audit import AUDIT_RETENTION_MS, audit_topic
    from hifi.check import CheckReport, probe_kafka

    report = CheckReport(PROG)
    for dest in destinations:
        acc = dest.accounting
        report.ok(
            f"destination {dest.name}: audit {'on' if acc.audit else 'off'},"
            f" settle {for_people(acc.settle_s)}, lag SLA {for_people(acc.lag_sla_s)},"
            f" loss alarm above {acc.loss_alarm_ratio:g}"
        )
    report.ok(_archive_line(archive_dir))
    report.ok(f"kafka settings: bootstrap {settings.bootstrap}, {settings.security_protocol}")
    if probe:
        topic = audit_topic()
        await probe_kafka(
            settings,
            report,
            source_topics=sorted({t for d in destinations for t in d.source_topics} | {topic}),
            retention_wanted={topic: AUDIT_RETENTION_MS},
        )
    return report


def _archive_line(root: Path) -> str:
    """What the auditor would find at its archive, read without changing anything: a check
    creates no directory and writes no probe file (the auditor does both when it starts).
    `ConfigError` when the auditor could not write there."""
    if root.exists():
        if not root.is_dir():
            raise ConfigError(f"--archive {root}: is a file, not a directory")
        if not os.access(root, os.W_OK | os.X_OK):
            raise ConfigError(f"--archive {root}: not writable by this user")
        return f"archive {root}: writable"
    parent = root.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--archive {root}: cannot create it: {parent} is not writable")
    return f"archive {root}: does not exist yet; the auditor will create it (in {parent})"


@cli.command()
@click.option("--dest", required=True, metavar="NAME", help="Destination whose table to print.")
@click.option("--from", "from_text", metavar="T", help="From T: ISO 8601, or a duration ago (2h).")
@click.option(
    "--to", "to_text", metavar="T", help="Until T (exclusive): ISO 8601, or a duration ago."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--url", metavar="URL", help="A running auditor's ops address (http://127.0.0.1:9402)."
)
@click.option(
    "--archive",
    "archive_dir",
    type=click.Path(path_type=Path),
    help="Read the archive directory instead of a running auditor.",
)
@click.option("--availability", is_flag=True, help="The day's availability instead of the table.")
@click.option(
    "--day", "day_text", metavar="DATE", help="With --availability: the UTC day (default today)."
)
def report(
    dest: str,
    from_text: str | None,
    to_text: str | None,
    fmt: str,
    url: str | None,
    archive_dir: Path | None,
    availability: bool,
    day_text: str | None,
) -> None:
    """Print the per-minute loss table of a destination, or a day's availability.

    From a running auditor (--url) or from the archive (--archive); exactly one of the two.
    """
    from hifi.accounting.tables import day_availability, day_range_ms

    if (url is None) == (archive_dir is None):
        raise ConfigError(
            "give exactly one of --url (a running auditor) and --archive (a directory)"
        )
    now_ms = int(time.time() * 1000)
    from_ms: int | None
    to_ms: int | None
    if availability:
        day = _day(day_text, now_ms)
        from_ms, to_ms = day_range_ms(day)
    else:
        from_ms = parse_time(from_text, now_ms=now_ms, flag="--from") if from_text else None
        to_ms = parse_time(to_text, now_ms=now_ms, flag="--to") if to_text else None
    if url is not None:
        rows, final_before_ms = _from_auditor(url, dest, from_ms, to_ms)
    else:
        assert archive_dir is not None
        rows, final_before_ms = _from_archive(archive_dir, dest, from_ms, to_ms, now_ms)
    if availability:
        result = day_availability(rows, day, final_before_ms=final_before_ms, now_ms=now_ms)
        _show_availability(dest, fmt, result)
    else:
        _show_table(dest, fmt, rows)


def _show_availability(dest: str, fmt: str, result: dict[str, Any]) -> None:
    import orjson

    from hifi.accounting.tables import render_availability

    result["dest"] = dest
    if fmt == "json":
        click.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        _console().print(render_availability(result, dest=dest))


def _show_table(dest: str, fmt: str, rows: list[dict[str, Any]]) -> None:
    import orjson

    from hifi.accounting.tables import render

    if fmt == "json":
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    _console().print(render(rows, title=f"{dest}: per-minute accounts (UTC)"))
    if not rows:
        click.echo(f"no minutes with events for {dest} in this range", err=True)


def _console() -> Console:
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _day(text: str | None, now_ms: int) -> date:
    if text is None:
        return datetime.fromtimestamp(now_ms / 1000, UTC).date()
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--day {text!r}: use a date, YYYY-MM-DD") from None


def _from_auditor(
    url: str, dest: str, from_ms: int | None, to_ms: int | None
) -> tuple[list[dict[str, Any]], int | None]:
    import asyncio

    import httpx

    from hifi.accounting.client import HTTP_TIMEOUT_S, base_url, fetch_tables

    base = base_url(url)

    async def fetch() -> AuditorTables:
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client:
            return await fetch_tables(client, base, dest, from_ms=from_ms, to_ms=to_ms)

    try:
        found = asyncio.run(fetch())
    except HifiError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise HifiError(f"--url {exc}") from None
    return found.rows, found.final_before_ms


def _from_archive(
    root: Path, dest: str, from_ms: int | None, to_ms: int | None, now_ms: int
) -> tuple[list[dict[str, Any]], int | None]:
    from auditor.archive.read import read_minutes, read_settings
    from hifi.accounting.tables import report_row

    if not root.is_dir():
        raise ConfigError(f"--archive {root}: not a directory")
    rows = [report_row(row) for row in read_minutes(root, dest, from_ms=from_ms, to_ms=to_ms)]
    versions = read_settings(root, dest)
    if not versions and not rows:
        raise ConfigError(f"--archive {root}: nothing archived for destination {dest!r}")
    settle_s = float(versions[-1]["settings"]["settle_s"]) if versions else 300.0
    final_before_ms = now_ms - round(settle_s * 1000) - MINUTE_MS
    return rows, final_before_ms


def main() -> None:
    """The `auditor` command; a stop signal is caught and the allocators set from here on, before
    anything heavy loads."""
    run_daemon_command(cli, PROG)
