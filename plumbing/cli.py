"""What every hifi command shares: one-line errors with exit codes, and running a daemon until a signal."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn

import click
import structlog

from plumbing.errors import ConfigError, HifiError

EXIT_FAILURE = 1
EXIT_USAGE = 2

log = structlog.get_logger(__name__)


def fail(prog: str, message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `prog: message` on stderr, no traceback, and exit with `code`."""
    click.echo(f"{prog}: {message}", err=True)
    sys.exit(code)


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
