"""The one runner of every hifi command: a failure is one line on stderr and its exit code; a
daemon runs until a signal asks it to drain, from the first instant of the process.

A command raises; it never prints its own error or picks an exit code (click's model:
`ClickException.exit_code`, handled once in `BaseCommand.main`). `run_command` catches what
escapes and prints `WHERE: message`, WHERE being the command path (`connector rewind`), then
exits with the exception's code: `HifiError.exit_code` (2 for `ConfigError`, 1 otherwise),
click's for usage errors (2). No traceback, and the message goes through `mask` first.

This module imports nothing heavy (no asyncio, structlog or the catalog at import time): every
command imports it before it parses its arguments, and `--help` must answer at once.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, NoReturn

import click

from hifi.allocators import settle_allocators
from hifi.errors import ConfigError, HifiError
from hifi.redaction import mask

if TYPE_CHECKING:
    import asyncio

EXIT_FAILURE = HifiError.exit_code  # 1: unreachable or failed; another try may succeed
EXIT_USAGE = ConfigError.exit_code  # 2: bad configuration or usage; fix the input first

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_DURATION_RE = re.compile(r"(?:(\d+)([smhd]))+")
_DURATION_PART_RE = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def fail(prog: str, message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `prog: message` on stderr, no traceback, and exit with `code`."""
    click.echo(_line(prog, message), err=True)
    sys.exit(code)


class _Failed(click.ClickException):
    """A `HifiError` (or a timeout) that ended a command, with the command path it ended; shown
    as `PATH: message` by the runner and by click's own `main` (as under `CliRunner`) alike."""

    exit_code = EXIT_FAILURE

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(_line(self.where, self.message), err=file is None, file=file)


class _BadInput(_Failed):
    """A `ConfigError` that ended a command."""

    exit_code = EXIT_USAGE


def _failure(where: str, message: str, exit_code: int) -> _Failed:
    return (_BadInput if exit_code == EXIT_USAGE else _Failed)(where, message)


def _line(where: str, message: str) -> str:
    return f"{where}: {mask(' '.join(message.split()))}"


def _named(ctx: click.Context, invoke: Callable[[], Any]) -> Any:
    """Run `invoke`; a hifi error escaping it leaves as `_Failed`, naming this command's path."""
    try:
        return invoke()
    except HifiError as exc:
        raise _failure(ctx.command_path, str(exc), exc.exit_code) from exc
    except TimeoutError as exc:  # an `asyncio.timeout` around a whole operation ran out
        raise _Failed(ctx.command_path, str(exc) or "timed out") from exc


_PREPARE = "hifi.cli.prepare"


def before_subcommand(ctx: click.Context, prepare: Callable[[], None]) -> None:
    """Run `prepare` (configure logging, say) when the subcommand runs: after its arguments
    parsed, so its `--help` or a usage error never pays for what `prepare` imports."""
    ctx.meta[_PREPARE] = prepare


class Command(click.Command):
    """A hifi subcommand: a `HifiError` it raises ends it as `PATH: message`, its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        prepare = ctx.meta.pop(_PREPARE, None)
        if prepare is not None:
            prepare()
        return _named(ctx, lambda: super(Command, self).invoke(ctx))


class Group(click.Group):
    """A hifi command with subcommands; they (and its nested groups) are hifi commands too."""

    command_class = Command
    group_class = type  # a nested group is a `Group` as well

    def invoke(self, ctx: click.Context) -> Any:
        return _named(ctx, lambda: super(Group, self).invoke(ctx))


def run_command(command: click.Command, prog: str) -> NoReturn:
    """Run a hifi command and exit: 0, or one line on stderr and the failure's exit code."""
    try:
        code = command.main(prog_name=prog, standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else prog
        fail(where, f"{exc.format_message()} (see '{where} --help')", EXIT_USAGE)
    except _Failed as exc:
        fail(exc.where, exc.message, exc.exit_code)
    except click.ClickException as exc:
        fail(prog, exc.format_message(), exc.exit_code)
    except click.Abort:
        fail(prog, "aborted", EXIT_FAILURE)
    except HifiError as exc:  # raised while the arguments were parsed, before a command ran
        fail(prog, str(exc), exc.exit_code)
    raise SystemExit(code if isinstance(code, int) else 0)


class StopSignals:
    """SIGTERM and SIGINT from the first instant of a daemon's process to its end.

    `catch()` is the first thing a daemon's `main()` does, before the heavy imports: a stop
    that arrives while the process still imports or loads its catalog is remembered instead of
    killing it. `hand_over()` gives them to the running event loop (the daemon drains on
    them); a daemon asked to stop before that point exits 0 without ever joining its group.
    A one-shot subcommand `release()`s them: the default handling back, and a signal that
    came meanwhile delivered now.
    """

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self._caught = False

    def catch(self) -> None:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, self._remember)
        self._caught = True

    def _remember(self, signum: int, frame: FrameType | None) -> None:
        self.received = self.received or signal.Signals(signum)

    def release(self) -> None:
        if not self._caught:
            return
        self._caught = False
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if self.received is not None:
            signal.raise_signal(self.received)

    def hand_over(self, loop: asyncio.AbstractEventLoop, request_stop: Callable[[], None]) -> bool:
        """Route the signals to `request_stop` from now on; True if one came before."""
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, _on_signal, sig, request_stop)
        self._caught = False
        return self.received is not None


#: the process's stop signals; signal handlers are process-wide, so there is one
STOP_SIGNALS = StopSignals()


def run_daemon_command(command: click.Command, prog: str) -> NoReturn:
    """A daemon's `main()`: from its first instant a stop signal is caught (`STOP_SIGNALS`) and
    its allocators are set (`hifi.allocators`), before anything heavy loads; then the command
    runs as `run_command` runs it."""
    STOP_SIGNALS.catch()
    settle_allocators()
    run_command(command, prog)


def run_daemon(run: Callable[[], Awaitable[None]], request_stop: Callable[[], None]) -> None:
    """Run a daemon's coroutine until it returns; SIGTERM/SIGINT ask it to drain, and one that
    came before the loop ran ends it at once (exit 0). A `HifiError` propagates to the runner.
    Its threads are all started first (`hifi.threads`); meanwhile the memory it frees goes back
    to the system (`hifi.memory`)."""
    import asyncio

    import structlog

    log = structlog.get_logger(__name__)

    from hifi.event_loop import loop_factory, loop_kind
    from hifi.memory import releasing_memory
    from hifi.threads import start_threads

    kind = loop_kind()  # a bad HIFI_EVENT_LOOP is a ConfigError before anything starts

    async def main() -> None:
        if STOP_SIGNALS.hand_over(asyncio.get_running_loop(), request_stop):
            log.info("stopped_before_start", signal=getattr(STOP_SIGNALS.received, "name", None))
            return
        log.debug("event_loop", kind=kind)
        await start_threads()
        async with releasing_memory():
            await run()

    try:
        with asyncio.Runner(loop_factory=loop_factory(kind)) as runner:
            runner.run(main())
    except HifiError as exc:
        if exc.exit_code != EXIT_USAGE:
            log.error("daemon_failed", error=str(exc))
        raise


def _on_signal(sig: signal.Signals, request_stop: Callable[[], None]) -> None:
    import structlog

    structlog.get_logger(__name__).info("signal_received", signal=sig.name)
    request_stop()


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


__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "STOP_SIGNALS",
    "Command",
    "Group",
    "before_subcommand",
    "fail",
    "parse_time",
    "run_command",
    "run_daemon",
    "run_daemon_command",
]
