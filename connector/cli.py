"""`connector --dest NAME`: the command line of the egest daemon."""

from __future__ import annotations

import asyncio

import click

from config.catalog import Catalog, default_catalog_dir
from connector.check import check
from connector.daemon import Connector
from hifi.cli import (
    DaemonFlags,
    daemon_options,
    fail,
    run_command,
    run_daemon,
    version_option,
)
from hifi.errors import ConfigError
from hifi.kafka_settings import KafkaSettings

PROG = "connector"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option(PROG)
@click.option("--dest", required=True, help="Destination name: the file NAME.toml in the catalog.")
@daemon_options(
    metrics_port=9400,
    metrics_help="Port for /metrics, /healthz and /readyz (0 picks a free one).",
    idle_help="Exit cleanly once no record has arrived for this long.",
)
def cli(dest: str, flags: DaemonFlags) -> None:
    """Deliver the events of destination DEST from Kafka to its HTTP endpoint.

    Offsets are committed only once every record before them is delivered, handed to the
    retrier (NAME.retry_in) or dead-lettered (NAME.dlq). SIGTERM drains in-flight requests,
    commits and exits 0. Kafka is reached through HIFI_KAFKA_BOOTSTRAP and HIFI_KAFKA_*.
    """
    try:
        destination = Catalog(flags.catalog or default_catalog_dir()).load(dest)
        settings = KafkaSettings.from_env()
    except ConfigError as exc:
        fail(PROG, str(exc))
    if flags.check:
        asyncio.run(check(destination, settings, probe=flags.probe)).finish()
    connector = Connector(
        destination,
        settings,
        metrics_port=flags.metrics_port,
        metrics_host=flags.metrics_host,
        until_idle_s=flags.until_idle_s,
    )
    run_daemon(PROG, connector.run, connector.request_stop)


def main() -> None:
    """The `connector` command."""
    run_command(cli, PROG)
