"""`HIFI_METRICS_PORT` sets every daemon's `--metrics-port`, so a unit or an instance's env file picks its port."""

from __future__ import annotations

import click
import pytest

import auditor.cli
import connector.cli
import retrier.cli
from hifi.cli_options import METRICS_PORT_ENV
from tests.cli.test_manual import help_text

DAEMONS: dict[str, tuple[click.Command, list[str], int]] = {
    "connector": (connector.cli.cli, ["--dest", "tvinsight"], 9400),
    "retrier": (retrier.cli.cli, [], 9401),
    "auditor": (auditor.cli.cli, [], 9402),
}


def _parsed_port(prog: str, args: list[str]) -> int:
    """The `--metrics-port` the daemon's command line parses to, without running the daemon."""
    command = DAEMONS[prog][0]
    with command.make_context(prog, [*DAEMONS[prog][1], *args]) as ctx:
        port = ctx.params["metrics_port"]
    assert isinstance(port, int)
    return port


@pytest.mark.parametrize("prog", sorted(DAEMONS))
def test_the_environment_sets_the_port_and_the_flag_wins(
    prog: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the variable a daemon takes its own default; with it, the variable's port; the
    flag beats the variable."""
    monkeypatch.delenv(METRICS_PORT_ENV, raising=False)
    assert _parsed_port(prog, []) == DAEMONS[prog][2]
    monkeypatch.setenv(METRICS_PORT_ENV, "9417")
    assert _parsed_port(prog, []) == 9417
    assert _parsed_port(prog, ["--metrics-port", "9500"]) == 9500


@pytest.mark.parametrize("value", ["abc", "70000", "-1"])
def test_a_bad_port_in_the_environment_names_the_variable(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port that is no port, set in the environment, is a usage error (exit 2) whose line names
    the variable and the value, since no flag on the command line shows where it came from."""
    monkeypatch.setenv(METRICS_PORT_ENV, value)
    with pytest.raises(click.BadParameter) as raised:
        _parsed_port("connector", [])
    assert raised.value.exit_code == 2
    assert f"${METRICS_PORT_ENV}={value!r} is not a port" in raised.value.format_message()


@pytest.mark.parametrize("prog", sorted(DAEMONS))
def test_the_help_names_the_variable(prog: str) -> None:
    """Each daemon's `--help` says the variable that sets its port."""
    assert f"${METRICS_PORT_ENV}" in help_text(prog)
