"""The flags hifi's commands share: `--version`, `--catalog`, and the daemons' ops, idle and logging flags.

Defining them imports nothing heavy: `--help` and `--version` answer before any of hifi's
runtime (asyncio, structlog, the catalog) is loaded. The few values the flags show as defaults
are repeated here from the modules that own them (pinned equal by tests/cli/test_options.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

import click
from click.core import ParameterSource

from hifi.cli import STOP_SIGNALS, Group, before_subcommand
from hifi.defaults import LOG_LEVELS, METRICS_HOST
from hifi.environment import INSTANCE_ID_ENV

if TYPE_CHECKING:
    from hifi.logging import LogFormat

F = TypeVar("F", bound=Callable[..., Any])

#: The environment variable of `--metrics-port`: one port per daemon (unit, instance).
METRICS_PORT_ENV = "HIFI_METRICS_PORT"


def version_option(prog: str) -> Callable[[F], F]:
    """`--version`: print `PROG VERSION` and exit 0 (the installed version, read only then)."""

    def show(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        if not value or ctx.resilient_parsing:
            return
        from hifi.version import VERSION

        click.echo(f"{prog} {VERSION}")
        ctx.exit()

    return click.option(
        "--version",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=show,
        help="Show the version and exit.",
    )


#: `-h` as well as `--help`, on every hifi command
HELP_NAMES = {"help_option_names": ["-h", "--help"]}


def daemon_group(prog: str) -> Callable[[Callable[..., Any]], Group]:
    """A daemon's command (`connector`, `ingest`...): run alone it serves, and it holds the
    one-shot subcommands; `-h` and `--version` as every hifi command has them."""

    def decorate(function: Callable[..., Any]) -> Group:
        group = click.group(cls=Group, invoke_without_command=True, context_settings=HELP_NAMES)
        return group(version_option(prog)(function))

    return decorate


def dests_option(verb: str) -> Callable[[F], F]:
    """`--dest NAME`, repeatable, of a daemon over several destinations (the auditor, the
    retrier); `verb` is what it does to each."""
    return click.option(
        "--dest",
        "dests",
        multiple=True,
        metavar="NAME",
        help=f"{verb} this destination (repeatable; default: every destination in the catalog).",
    )


def group_option(default: str) -> Callable[[F], F]:
    """`--group ID` of a daemon over several destinations: the consumer group its replicas
    share, `default` unless two deployments on one cluster split the destinations."""
    return click.option(
        "--group",
        "group_id",
        default=default,
        show_default=True,
        metavar="ID",
        help="Consumer group: its members share the destinations' partitions;"
        " split destinations with a group each.",
    )


def catalog_option(function: F) -> F:
    """`--catalog DIR`, shared by every command that reads the destination catalog."""
    return click.option(
        "--catalog",
        type=click.Path(path_type=Path, file_okay=False),
        default=None,
        help="Catalog directory (default: $HIFI_CATALOG_DIR, else the catalog shipped with hifi).",
    )(function)


def subcommand_catalog_option(function: F) -> F:
    """`--catalog DIR` of a daemon's subcommand, handed to it as `catalog`: when not given
    there, the one given before the subcommand (`connector --catalog DIR rewind ...`)."""

    @functools.wraps(function)
    def command(*args: Any, catalog: Path | None, **kwargs: Any) -> Any:
        given_before: Path | None = click.get_current_context().obj
        return function(*args, catalog=catalog or given_before, **kwargs)

    return catalog_option(cast("F", command))


class _FinitePositive(click.FloatRange):
    """A number of seconds above 0; `inf` and `nan` are not."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number


FINITE_POSITIVE_SECONDS = _FinitePositive(min=0, min_open=True)


class _Port(click.IntRange):
    """A TCP port, 0 to 65535 (0: any free one); a bad one from the environment names the variable."""

    name = "port"

    def __init__(self) -> None:
        super().__init__(0, 65535)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            if ctx is None or param is None or param.name is None:
                raise
            if ctx.get_parameter_source(param.name) is not ParameterSource.ENVIRONMENT:
                raise
            self.fail(f"${METRICS_PORT_ENV}={value!r} is not a port from 0 to 65535", param, ctx)


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
    instance_id: str | None  # join the consumer group as this static member

    def ops(self) -> OpsArguments:
        """What a daemon's constructor takes from these flags: its ops port and idle exit."""
        return OpsArguments(
            metrics_port=self.metrics_port,
            metrics_host=self.metrics_host,
            until_idle_s=self.until_idle_s,
        )


class OpsArguments(TypedDict):
    """The keyword arguments of `DaemonFlags.ops`, as every daemon's constructor names them."""

    metrics_port: int
    metrics_host: str
    until_idle_s: float | None


def daemon_options(
    *,
    metrics_port: int,
    metrics_help: str,
    idle_help: str,
    probe_help: str,
    probe_implied_by: tuple[str, ...] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The flags every hifi daemon shares (catalog, ops port, --until-idle, logging, instance
    id), handed to the command as one `flags: DaemonFlags` argument once logging is configured.
    The command runs only to serve (or `--check`): a subcommand runs instead, with the group's
    `--catalog` as its context object.

    A subcommand or `--check` is a one-shot run, not the daemon: the stop signals caught since
    the start go back to their default handling before it runs, and the libraries' log lines
    stay quiet. `probe_implied_by` names flags of the command that imply `--probe` (the
    connector's `--probe-post`)."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def command(*args: Any, **kwargs: Any) -> Any:
            flags = _daemon_flags(kwargs, probe_implied_by)
            ctx = click.get_current_context()
            if ctx.invoked_subcommand is not None:
                ctx.obj = flags.catalog  # what the subcommand's own --catalog defaults to
                STOP_SIGNALS.release()
                before_subcommand(ctx, functools.partial(_log_to, flags, libraries=False))
                return None
            if flags.check:
                STOP_SIGNALS.release()
                _log_to(flags, libraries=False)
            else:
                _log_to(flags, libraries=True)
            return function(*args, flags=flags, **kwargs)

        decorated: Callable[..., Any] = command
        options = _daemon_flag_options(metrics_port, metrics_help, idle_help, probe_help)
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return decorate


def _log_to(flags: DaemonFlags, *, libraries: bool) -> None:
    """Configure logging; a one-shot run's failure is its one line, so it passes
    `libraries=False` and the libraries' own warnings stay quiet."""
    from hifi.logging import configure_logging

    configure_logging(flags.log_format, flags.log_level, libraries=libraries)


def _daemon_flags(kwargs: dict[str, Any], probe_implied_by: tuple[str, ...]) -> DaemonFlags:
    """Take the shared flags out of a command's keyword arguments."""
    check = kwargs.pop("check")
    probe = kwargs.pop("probe") or any(kwargs.get(name) for name in probe_implied_by)
    return DaemonFlags(
        catalog=kwargs.pop("catalog"),
        metrics_host=kwargs.pop("metrics_host"),
        metrics_port=kwargs.pop("metrics_port"),
        until_idle_s=kwargs.pop("until_idle_s"),
        log_format=kwargs.pop("log_format"),
        log_level=kwargs.pop("log_level"),
        check=check or probe,
        probe=probe,
        instance_id=kwargs.pop("instance_id"),
    )


def _daemon_flag_options(
    metrics_port: int, metrics_help: str, idle_help: str, probe_help: str
) -> list[Callable[[F], F]]:
    return [
        *_ops_options(metrics_port, metrics_help, idle_help),
        *_log_and_check_options(probe_help, validates="the catalog"),
        instance_id_option,
    ]


def _ops_options(metrics_port: int, metrics_help: str, idle_help: str) -> list[Callable[[F], F]]:
    return [
        catalog_option,
        click.option(
            "--metrics-host",
            envvar="HIFI_METRICS_HOST",
            default=METRICS_HOST,
            show_default=True,
            help="Address the ops port listens on ($HIFI_METRICS_HOST); 0.0.0.0 for all.",
        ),
        click.option(
            "--metrics-port",
            envvar=METRICS_PORT_ENV,
            type=_Port(),
            default=metrics_port,
            show_default=True,
            help=f"{metrics_help} Also ${METRICS_PORT_ENV}: set it per unit or instance, never in"
            " an environment file every daemon reads.",
        ),
        click.option(
            "--until-idle",
            "until_idle_s",
            type=FINITE_POSITIVE_SECONDS,
            default=None,
            metavar="SECONDS",
            help=idle_help,
        ),
    ]


def log_and_check_options(*, validates: str, probe_help: str) -> Callable[[F], F]:
    """`--log-format`, `--log-level`, `--check` (of `validates`, the command's input) and
    `--probe`, each handed to the command as it is: for a service without the daemons'
    catalog (`ingest`)."""

    def decorate(function: F) -> F:
        for option in reversed(_log_and_check_options(probe_help, validates=validates)):
            function = option(function)
        return function

    return decorate


def _log_and_check_options(probe_help: str, *, validates: str) -> list[Callable[[F], F]]:
    return [
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
            help=f"Validate {validates} and the environment, print what was found, and exit:"
            " 0 fine, 2 bad configuration, 1 unreachable.",
        ),
        click.option("--probe", is_flag=True, help=probe_help),
    ]


INSTANCE_ID_FROM = f"--instance-id (or ${INSTANCE_ID_ENV})"  # where a bad id came from


def instance_id_option(function: F) -> F:
    """`--instance-id ID` ($HIFI_INSTANCE_ID): the daemon joins its consumer group as a static
    member (KIP-345); checked, and logged at start, with the Kafka settings."""
    return click.option(
        "--instance-id",
        envvar=INSTANCE_ID_ENV,
        default=None,
        metavar="ID",
        help="Join the consumer group as static member ID ($HIFI_INSTANCE_ID; in Kubernetes a"
        " StatefulSet's pod name). On Kafka a restart within the session timeout keeps its"
        " partitions without a rebalance; a stop leaves them idle until the timeout"
        " (docs/rebalancing.md).",
    )(function)
