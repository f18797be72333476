"""What every hifi command shares: one-line errors and exit codes, common flags, running a daemon to a signal."""

from __future__ import annotations

import asyncio
import functools
import math
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import structlog

from hifi.errors import ConfigError, HifiError
from hifi.logging import LOG_LEVELS, LogFormat, configure_logging
from hifi.ops_http import DEFAULT_HOST
from hifi.redaction import mask
from hifi.version import VERSION

F = TypeVar("F", bound=Callable[..., Any])

_DURATION_RE = re.compile(r"(?:(\d+)([smhd]))+")
_DURATION_PART_RE = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}

EXIT_FAILURE = 1
EXIT_USAGE = 2

log = structlog.get_logger(__name__)


def fail(prog: str, message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `prog: message` on stderr, no traceback, and exit with `code`."""
    click.echo(f"{prog}: {mask(' '.join(message.split()))}", err=True)
    sys.exit(code)


def run_command(command: click.Command, prog: str) -> NoReturn:
    """Run a click command; usage errors are one line on stderr and exit 2, like every failure."""
    try:
        code = command.main(prog_name=prog, standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else prog
        fail(where, f"{exc.format_message()} (see '{where} --help')", EXIT_USAGE)
    except click.ClickException as exc:
        fail(prog, exc.format_message(), exc.exit_code)
    except click.Abort:
        fail(prog, "aborted", EXIT_FAILURE)
    raise SystemExit(code if isinstance(code, int) else 0)


def run_daemon(
    prog: str, run: Callable[[], Awaitable[None]], request_stop: Callable[[], None]
) -> None:
    """Run a daemon's coroutine; SIGTERM/SIGINT ask it to drain; errors end in one line and exit 1."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _on_signal, sig, request_stop)
        await run()

    try:
        asyncio.run(main())
    except ConfigError as exc:
        fail(prog, str(exc), EXIT_USAGE)
    except HifiError as exc:
        log.error("daemon_failed", error=str(exc))
        fail(prog, str(exc), EXIT_FAILURE)


def _on_signal(sig: signal.Signals, request_stop: Callable[[], None]) -> None:
    log.info("signal_received", signal=sig.name)
    request_stop()


def version_option(prog: str) -> Callable[[F], F]:
    """`--version`: print `PROG VERSION` and exit 0."""
    return click.version_option(VERSION, "--version", prog_name=prog, message="%(prog)s %(version)s")


def catalog_option(function: F) -> F:
    """`--catalog DIR`, shared by every command that reads the destination catalog."""
    return click.option(
        "--catalog",
        type=click.Path(path_type=Path, file_okay=False),
        default=None,
        help="Catalog directory (default: $HIFI_CATALOG_DIR, else the catalog shipped with hifi).",
    )(function)


class _FinitePositive(click.FloatRange):
    """A number of seconds above 0; `inf` and `nan` are not."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number


FINITE_POSITIVE_SECONDS = _FinitePositive(min=0, min_open=True)


@dataclass(frozen=True, slots=True)
class DaemonFlags:
    """The flags every hifi daemon shares, parsed; logging is configured from them already."""

    catalog: Path | None
    metrics_host: str
    metrics_port: int
    until_idle_s: float | None
    log_format: LogFormat
    log_level: str
    check: bool  # validate and report instead of running
    probe: bool  # with check: also reach Kafka and the destinations


def daemon_options(
    *, metrics_port: int, metrics_help: str, idle_help: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The flags every hifi daemon shares (catalog, ops port, --until-idle, logging), handed to
    the command as one `flags: DaemonFlags` argument once logging is configured."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def command(
            *args: Any,
            catalog: Path | None,
            metrics_host: str,
            metrics_port: int,
            until_idle_s: float | None,
            log_format: LogFormat,
            log_level: str,
            check: bool,
            probe: bool,
            **kwargs: Any,
        ) -> Any:
            flags = DaemonFlags(
                catalog,
                metrics_host,
                metrics_port,
                until_idle_s,
                log_format,
                log_level,
                check or probe,
                probe,
            )
            configure_logging(log_format, log_level, libraries=not flags.check)
            return function(*args, flags=flags, **kwargs)

        options = [
            catalog_option,
            click.option(
                "--metrics-host",
                envvar="HIFI_METRICS_HOST",
                default=DEFAULT_HOST,
                show_default=True,
                help="Address the ops port listens on ($HIFI_METRICS_HOST); 0.0.0.0 for all.",
            ),
            click.option(
                "--metrics-port",
                type=click.IntRange(0, 65535),
                default=metrics_port,
                show_default=True,
                help=metrics_help,
            ),
            click.option(
                "--until-idle",
                "until_idle_s",
                type=FINITE_POSITIVE_SECONDS,
                default=None,
                metavar="SECONDS",
                help=idle_help,
            ),
            click.option(
                "--log-format",
                type=click.Choice(["auto", "json", "console"]),
                default="auto",
                show_default=True,
                help="auto: JSON lines unless stderr is a terminal.",
            ),
            click.option(
                "--log-level",
                type=click.Choice(LOG_LEVELS, case_sensitive=False),
                default="INFO",
                show_default=True,
            ),
            click.option(
                "--check",
                is_flag=True,
                help="Validate the catalog and the environment, print what was found, and exit:"
                " 0 fine, 2 bad configuration, 1 unreachable.",
            ),
            click.option(
                "--probe",
                is_flag=True,
                help="With --check: also reach Kafka (topics, retention) and the destinations"
                " (TCP, TLS and a HEAD request; never a POST).",
            ),
        ]
        decorated: Callable[..., Any] = command
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return decorate


def parse_time(text: str, *, now_ms: int, flag: str = "--since") -> int:
    """Epoch ms from an ISO 8601 timestamp (UTC unless it says otherwise) or a duration ago."""
    text = text.strip()
    if _DURATION_RE.fullmatch(text):
        seconds = sum(int(n) * _UNIT_S[unit] for n, unit in _DURATION_PART_RE.findall(text))
        return now_ms - seconds * 1000
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r}: use an ISO timestamp (2026-01-31T08:00:00Z) "
            "or a duration ago (30m, 2h, 1d, 1h30m)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
