"""`spark-batch`: the batch jobs over the auditor's archive (PySpark).

    spark-batch reconcile --archive PATH [--dest NAME ...] --from DATE [--to DATE] --out DIR
                          [--lag-sla-s S] [--master local[*]]
    spark-batch package --out DIR

Run directly it starts a local Spark (`--master`, default `local[*]`); under `spark-submit`
(`package` builds the zip and driver file it takes: docs/spark-cluster.md) the submit command
decides the master. Bad input
(an archive with no rows, a destination or range it does not hold, a corrupt Parquet file,
bad flags) is one line on stderr and exit 2, with nothing written under `--out`; other
failures exit 1. Neither Spark nor the archive reader is imported before `reconcile` runs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hifi.cli import Group, parse_time, run_command
from hifi.cli_options import version_option
from hifi.errors import CommandFailed, ConfigError, HifiError
from spark_batch.package import DRIVER_NAME, ZIP_NAME
from spark_batch.package import package as build
from spark_batch.session import DEFAULT_MASTER, spark_session

if TYPE_CHECKING:
    from spark_batch.archive_input import Window

PROG = "spark-batch"
_DAY_MS = 86_400_000
_MINUTE_MS = 60_000
# the words Spark uses when a file of the input cannot be read (corrupt, truncated, not Parquet)
_BAD_FILE = re.compile(
    r"FAILED_READ_FILE|CANNOT_READ_FILE_FOOTER|not a Parquet file|is not a Parquet file"
    r"|magic number|corrupt|EOFException",
    re.IGNORECASE,
)
_FILE_IN_MESSAGE = re.compile(r"(?:file:)?(/[^\s,;'\"]+\.parquet)")


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@version_option(PROG)
def cli() -> None:
    """Batch jobs over the auditor's archive: the authoritative recount of delivery."""


@cli.command()
@click.option(
    "--archive",
    required=True,
    metavar="PATH",
    help="The auditor's archive (a directory, or any path Spark reads: hdfs://, s3a://).",
)
@click.option(
    "--dest",
    "dests",
    multiple=True,
    metavar="NAME",
    help="Only this destination (repeatable); default: every destination in the archive.",
)
@click.option(
    "--from",
    "from_text",
    required=True,
    metavar="DATE",
    help="First minute: a UTC date (2026-11-22) or an ISO 8601 time.",
)
@click.option(
    "--to",
    "to_text",
    metavar="DATE",
    help="End of the range, exclusive: a date or time; default one day after --from.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Directory for the tables, minutes.json, summary.json and report.html (replaced whole).",
)
@click.option(
    "--lag-sla-s",
    type=click.FloatRange(min=0, min_open=True),
    metavar="S",
    help="Judge minutes against this p95 lag instead of the archived lag_sla_s.",
)
@click.option(
    "--master",
    default=None,
    metavar="URL",
    help=f"Spark master when run directly [default: {DEFAULT_MASTER}]; spark-submit sets its own.",
)
def reconcile(
    archive: str,
    dests: tuple[str, ...],
    from_text: str,
    to_text: str | None,
    out: Path,
    lag_sla_s: float | None,
    master: str | None,
) -> None:
    """Rebuild per-minute delivery tables from the archive, exactly and by event id.

    Writes under DIR: minutes.parquet, missing.parquet (the input of connector backfill
    --only-missing), days.parquet, nodes.parquet, minutes.json, summary.json and report.html
    with its charts. The same input gives the same output; a rerun replaces it.
    """
    window = _window(from_text, to_text)
    if "://" not in archive and not Path(archive).exists():  # a local path: no Spark to say so
        raise ConfigError(f"--archive {archive}: no such file or directory")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a directory")
    started = time.monotonic()
    summary = _run(archive, window, list(dests), out, lag_sla_s, master)
    for dest, about in summary["destinations"].items():
        click.echo(verdict_line(dest, about))
    click.echo(f"{PROG} reconcile: wrote {out} in {time.monotonic() - started:.1f} s")


@cli.command()
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help=f"Directory for {ZIP_NAME} and {DRIVER_NAME} (created; both replaced).",
)
def package(out: Path) -> None:
    """Build what spark-submit runs on a cluster: the job's zip and its driver file.

    The zip holds spark_batch, config and hifi; the driver's Python needs hifi's
    dependencies (pip install 'hifi-streams[spark]'). Then: spark-submit --master URL
    --py-files DIR/hifi-spark.zip DIR/spark_batch_driver.py reconcile ...
    """
    built = build(out)
    click.echo(
        f"{PROG} package: wrote {built.zip_path} ({built.files} files,"
        f" {built.zip_path.stat().st_size // 1024:,} KiB) and {built.driver_path}"
    )


def verdict_line(dest: str, about: Mapping[str, Any]) -> str:
    """The line `reconcile` prints per destination: counts, loss, lag, what availability counts."""
    from spark_batch.verdicts import loss_verdict

    totals = about["totals"]
    final, in_range = about["final_minutes"], about["range_minutes"]
    return (
        f"{dest}: {totals['entered']:,} entered, {totals['delivered']:,} delivered,"
        f" {totals['dead_lettered']:,} dead-lettered, {totals['in_retry']:,} in retry:"
        f" {loss_verdict(about)[0]}; {'on time' if about['on_time'] else 'minutes down for lag'};"
        f" availability over {final:,} final minutes of the range's {in_range:,}"
    )


def _window(from_text: str, to_text: str | None) -> Window:
    from spark_batch.archive_input import Window

    now_ms = int(time.time() * 1000)
    from_ms = parse_time(from_text, now_ms=now_ms, flag="--from")
    to_ms = parse_time(to_text, now_ms=now_ms, flag="--to") if to_text else from_ms + _DAY_MS
    from_ms -= from_ms % _MINUTE_MS
    to_ms += -to_ms % _MINUTE_MS
    if to_ms <= from_ms:
        raise ConfigError(f"--to {to_text!r} is not after --from {from_text!r}")
    return Window(from_ms, to_ms)


def _run(
    archive: str,
    window: Window,
    dests: list[str],
    out: Path,
    lag_sla_s: float | None,
    master: str | None,
) -> dict[str, Any]:
    """Reconcile on a Spark session and write the outputs; Spark's failures become hifi's:
    bad input (`ArchiveInputError`, an unreadable file) a `ConfigError`, the rest a failure."""
    from spark_batch.archive_input import ArchiveInputError
    from spark_batch.outputs import summarize, write_outputs
    from spark_batch.reconcile import reconcile as rebuild

    try:
        with spark_session("hifi-reconcile", master=master) as started:
            result = rebuild(
                started.spark, archive, window, dests=dests or None, lag_sla_s=lag_sla_s
            )
        summary = summarize(result, window, archive=archive)
        write_outputs(out, result, summary)
    except ArchiveInputError as exc:
        raise ConfigError(str(exc)) from exc
    except HifiError:
        raise
    except Exception as exc:  # Spark's and Py4J's errors: one line, the JVM's trace left out
        raise _spark_failure(exc, archive) from exc
    return summary


def _spark_failure(exc: Exception, archive: str) -> HifiError:
    """hifi's error, in one line, for an error Spark raised while reading or computing."""
    from spark_batch.archive_input import describe

    text = str(exc)
    if _BAD_FILE.search(text):
        found = _FILE_IN_MESSAGE.search(text)
        where = found.group(1) if found else archive
        return ConfigError(f"archive file {where}: cannot be read (corrupt or not Parquet)")
    return CommandFailed(f"spark failed: {describe(exc)}")


def main() -> None:
    """The `spark-batch` command."""
    run_command(cli, PROG)
