"""`ingest` serves the streams' HTTP API; `ingest hash-token` prints the hash a stream file stores for a token."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hifi.cli import STOP_SIGNALS, run_daemon, run_daemon_command
from hifi.cli_options import (
    FINITE_POSITIVE_SECONDS,
    METRICS_PORT_ENV,
    daemon_group,
    log_and_check_options,
)
from hifi.defaults import METRICS_HOST
from hifi.environment import REDIS_URL_ENV_VAR, STREAMS_ENV_VAR
from hifi.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from config.streams import Stream
    from hifi.check import CheckReport
    from hifi.kafka.settings import KafkaSettings
    from hifi.lookup_cache.redis_hash import RedisSettings
    from ingest.service import ServiceSettings

PROG = "ingest"
_PORT = click.IntRange(0, 65535)


@daemon_group(PROG)
@click.option(
    "--streams",
    "streams_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help=f"Streams directory, one NAME.toml per stream (default: ${STREAMS_ENV_VAR}).",
)
@click.option("--host", default="0.0.0.0", show_default=True, help="Address the API listens on.")  # noqa: S104
@click.option("--port", type=_PORT, default=8080, show_default=True, help="The API's port.")
@click.option(
    "--metrics-host",
    envvar="HIFI_METRICS_HOST",
    default=METRICS_HOST,
    show_default=True,
    help="Address of the ops port ($HIFI_METRICS_HOST).",
)
@click.option(
    "--metrics-port",
    envvar=METRICS_PORT_ENV,
    type=_PORT,
    default=9403,
    show_default=True,
    help=f"Port for /metrics, /healthz and /readyz (0 picks a free one; ${METRICS_PORT_ENV}).",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(1, 1_000_000),
    default=1024,
    show_default=True,
    help="Requests served at once; beyond, 503 with Retry-After.",
)
@click.option(
    "--max-in-flight-bytes",
    type=click.IntRange(1024),
    default=256 * 1024 * 1024,
    show_default=True,
    help="Body bytes the requests in flight may hold; beyond, 503 with Retry-After.",
)
@click.option(
    "--ack-timeout-s",
    type=FINITE_POSITIVE_SECONDS,
    default=10.0,
    show_default=True,
    help="A request whose events Kafka has not acknowledged by then is answered 503.",
)
@click.option(
    "--body-timeout-s",
    type=FINITE_POSITIVE_SECONDS,
    default=30.0,
    show_default=True,
    help="A request's body must have arrived within this long, else 408.",
)
@click.option(
    "--drain-timeout-s",
    type=FINITE_POSITIVE_SECONDS,
    default=30.0,
    show_default=True,
    help="On SIGTERM, requests in flight finish within this long.",
)
@log_and_check_options(
    validates="the streams", probe_help="With --check: also reach Kafka and the streams' topics."
)
@click.pass_context
def cli(
    ctx: click.Context,
    /,
    streams_dir: Path | None,
    log_format: str,
    log_level: str,
    check: bool,
    probe: bool,
    **serving: Any,
) -> None:
    """Accept events over HTTP and answer only once Kafka holds them.

    POST /v1/events/STREAM takes one JSON object, a JSON array of objects or NDJSON (gzip
    too) and answers a result per event once Kafka (acks=all) acknowledged every accepted
    one; POST /v1/events/STREAM:stream takes NDJSON over a chunked request and answers a line
    per event. A stream is NAME.toml in the streams directory: its topic, id and time fields,
    token hashes and limits (docs/ingest.md). With $HIFI_REDIS_URL, Idempotency-Key repeats
    get their first answer. SIGTERM stops intake, finishes the requests in flight and exits 0.
    """
    if ctx.invoked_subcommand is not None:
        STOP_SIGNALS.release()
        return
    from hifi.logging import configure_logging
    from ingest.service import ServiceSettings

    check = check or probe
    if check:
        STOP_SIGNALS.release()
    configure_logging(log_format, log_level, libraries=not check)  # type: ignore[arg-type]
    settings = ServiceSettings(**serving)  # the other flags: a field each, of the same name
    _serve(streams_dir, settings, check=check, probe=probe)


def _serve(
    streams_dir: Path | None, settings: ServiceSettings, *, check: bool, probe: bool
) -> None:
    from config.streams import default_streams_dir, load_streams
    from hifi.kafka.settings import KafkaSettings
    from hifi.lookup_cache.redis_hash import RedisSettings
    from ingest.service import IngestService

    streams = load_streams(streams_dir or default_streams_dir())
    kafka_settings = KafkaSettings.from_env()
    redis = RedisSettings.from_env() if os.environ.get(REDIS_URL_ENV_VAR) else None
    if check:
        import asyncio

        asyncio.run(_check(streams, kafka_settings, redis, probe=probe)).finish()
    service = IngestService(streams, kafka_settings, settings, redis=_fast(redis))
    run_daemon(service.run, service.request_stop)


async def _check(
    streams: Mapping[str, Stream],
    kafka_settings: KafkaSettings,
    redis: RedisSettings | None,
    *,
    probe: bool,
) -> CheckReport:
    """What the service would meet at start: its streams, Kafka's settings and Redis; with
    `probe`, Kafka reached and each stream's topic looked up (a missing one is a warning)."""
    from hifi import audit
    from hifi.check import CheckReport, probe_kafka

    report = CheckReport(PROG)
    for stream in streams.values():
        report.ok(
            f"stream {stream.name}: topic {stream.topic}, {len(stream.tokens_sha256)} token(s),"
            f" max_body_bytes {stream.max_body_bytes}, max_events_per_request"
            f" {stream.max_events_per_request}, max_event_bytes {stream.max_event_bytes}"
        )
    report.ok(
        f"kafka settings: bootstrap {kafka_settings.bootstrap}, {kafka_settings.security_protocol}"
    )
    report.ok(
        f"idempotency keys: {redis.describe()}"
        if redis is not None
        else f"idempotency keys: off (no ${REDIS_URL_ENV_VAR}): Idempotency-Key is ignored"
    )
    # the accepted trail: the auditor must read each fact before the audit topic deletes it
    audited = sorted(stream.name for stream in streams.values() if stream.audit)
    wanted = {audit.audit_topic(): audit.AUDIT_RETENTION_MS} if audited else {}
    report.ok(
        f"accepted trail: streams {', '.join(audited)}, facts to {audit.audit_topic()}"
        if audited
        else "accepted trail: off (every stream has audit = false)"
    )
    if probe:
        topics = {stream.topic for stream in streams.values()}
        await probe_kafka(kafka_settings, report, source_topics=topics, retention_wanted=wanted)
    return report


def _fast(redis: RedisSettings | None) -> RedisSettings | None:
    """Redis bounds for a request path: a Redis that does not answer within half a second is
    taken as down for that request (the key is ignored, the request served)."""
    import dataclasses

    if redis is None:
        return None
    return dataclasses.replace(redis, connect_timeout_s=0.5, command_timeout_s=0.5)


@cli.command("hash-token")
def hash_token() -> None:
    """Read a token on stdin; print the SHA-256 to put in a stream's tokens_sha256.

    The token itself is never stored: `openssl rand -hex 32 | tee token | ingest hash-token`
    makes one and prints its hash. One trailing newline is not part of the token.
    """
    from config.streams import hash_token as digest

    token = sys.stdin.read()
    token = token.removesuffix("\n").removesuffix("\r")
    if not token:
        raise ConfigError("no token on stdin; pipe one in: ingest hash-token < token-file")
    click.echo(digest(token))


def main() -> None:
    """The `ingest` command; a stop signal is caught and the allocators set from here on, before
    anything heavy loads."""
    run_daemon_command(cli, PROG)
