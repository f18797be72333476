"""The one runner: exit codes live on hifi's exception classes, and a failure is one line naming the command."""

from __future__ import annotations

import asyncio
import inspect
import re
import signal
import threading
from collections.abc import Iterator

import click
import prometheus_client
import pytest
from click.testing import CliRunner

import hifi.cli
from hifi import errors, memory
from hifi.cli import EXIT_FAILURE, EXIT_USAGE, Group, StopSignals, run_command, run_daemon
from hifi.environment import EVENT_LOOP_ENV
from hifi.threads import WORKER_THREADS

ERROR_CLASSES = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, errors.HifiError) and cls.__module__ == errors.__name__
]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_class_carries_its_exit_code(cls: type[errors.HifiError]) -> None:
    """Configuration errors (ConfigError and below) exit 2; every other hifi error exits 1."""
    expected = EXIT_USAGE if issubclass(cls, errors.ConfigError) else EXIT_FAILURE
    assert cls.exit_code == expected
    assert (EXIT_USAGE, EXIT_FAILURE) == (2, 1)


def test_every_error_class_is_in_the_tree_diagram() -> None:
    """The docstring of hifi/errors.py draws every class it defines."""
    assert errors.__doc__ is not None
    for cls in ERROR_CLASSES:
        assert re.search(rf"^[ │├└─]*{cls.__name__}\b", errors.__doc__, re.M), cls.__name__


@click.group(cls=Group, invoke_without_command=True)
@click.option("--fail-with", default=None)
def tool(fail_with: str | None) -> None:
    """A small command built the way hifi's are: a group, a subcommand, a nested group."""
    if fail_with == "config":
        raise errors.ConfigError("catalog/x.toml: key 'urll' is not allowed; did you mean url?")
    if fail_with == "kafka":
        raise errors.BrokerUnavailable("kafka 127.0.0.1:1: connection refused")


_RAISED = {
    "config": errors.BrokerAuthFailed("kafka refused the SASL credentials\n of user 'x'"),
    "stopped": errors.CommandFailed("stopped after 3 of 5; run again to resume"),
    "redis": errors.StoreUnavailable("redis at redis://127.0.0.1:1: connection refused"),
}


@tool.command()
@click.argument("what")
def run(what: str) -> None:
    async def work() -> None:
        if what == "timeout":
            async with asyncio.timeout(0):
                await asyncio.sleep(1)
        raise _RAISED[what]

    asyncio.run(work())


@tool.group()
def dlq() -> None:
    pass


@dlq.command("list")
def dlq_list() -> None:
    raise errors.UnknownTopic("topic tv.dlq does not exist")


def _run(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    monkeypatch.setattr("sys.argv", ["tool", *args])
    with pytest.raises(SystemExit) as ended:
        run_command(tool, "tool")
    captured = capsys.readouterr()
    assert captured.out == ""
    code = ended.value.code
    assert isinstance(code, int)
    return code, captured.err


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (
            ["--fail-with", "config"],
            2,
            "tool: catalog/x.toml: key 'urll' is not allowed; did you mean url?",
        ),
        (["--fail-with", "kafka"], 1, "tool: kafka 127.0.0.1:1: connection refused"),
        (["run", "config"], 2, "tool run: kafka refused the SASL credentials of user 'x'"),
        (["run", "redis"], 1, "tool run: redis at redis://127.0.0.1:1: connection refused"),
        (["run", "timeout"], 1, "tool run: timed out"),
        (["run", "stopped"], 1, "tool run: stopped after 3 of 5; run again to resume"),
        (["dlq", "list"], 1, "tool dlq list: topic tv.dlq does not exist"),
        (["run"], 2, "tool run: Missing argument 'WHAT'. (see 'tool run --help')"),
        (["--bogus"], 2, "tool: No such option '--bogus'. (see 'tool --help')"),
    ],
)
def test_a_failure_is_one_line_naming_the_command_and_its_code(
    args: list[str],
    code: int,
    line: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the command and however deep it raised, stderr is `PATH: message` and the exit
    code is the exception's (2 for configuration and usage, 1 for the rest)."""
    got_code, err = _run(args, capsys, monkeypatch)
    assert (got_code, err.splitlines()) == (code, [line])


def test_a_failure_under_clicks_own_main_is_the_same_line() -> None:
    """Run by click's standalone main (as CliRunner does), a hifi error is still the one line
    and its code, not click's `Error:` form or a traceback."""
    result = CliRunner().invoke(tool, ["run", "config"])
    assert result.exit_code == 2
    assert result.output == "tool run: kafka refused the SASL credentials of user 'x'\n"


@pytest.fixture
def fresh_stop_signals(monkeypatch: pytest.MonkeyPatch) -> Iterator[StopSignals]:
    """A StopSignals of its own, the test process's own handlers put back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    stop = StopSignals()
    monkeypatch.setattr(hifi.cli, "STOP_SIGNALS", stop)
    yield stop
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_stop_before_the_loop_runs_ends_the_daemon_before_it_starts(
    fresh_stop_signals: StopSignals,
) -> None:
    """A SIGTERM that arrives while the daemon still loads is remembered, not fatal; once the
    loop runs the daemon returns at once without starting its work."""
    fresh_stop_signals.catch()
    signal.raise_signal(signal.SIGTERM)
    assert fresh_stop_signals.received is signal.SIGTERM
    started: list[bool] = []

    async def run() -> None:
        started.append(True)

    run_daemon(run, lambda: None)
    assert started == []


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_a_stop_while_the_daemon_runs_asks_it_to_drain(
    fresh_stop_signals: StopSignals, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the loop running, SIGTERM reaches the daemon's request_stop, and the run ends as
    the daemon decides (here: once asked), on either event loop."""
    monkeypatch.setenv(EVENT_LOOP_ENV, kind)
    fresh_stop_signals.catch()
    asked = asyncio.Event()

    async def run() -> None:
        signal.raise_signal(signal.SIGTERM)
        await asyncio.wait_for(asked.wait(), 30)

    run_daemon(run, asked.set)
    assert asked.is_set()


@pytest.mark.parametrize(
    ("asked", "module"),
    [
        ("uvloop", "uvloop"),
        ("asyncio", "asyncio.unix_events"),
        ("", "uvloop"),
        (" asyncio ", "asyncio.unix_events"),
    ],
)
def test_a_daemon_runs_on_the_event_loop_asked_for(
    fresh_stop_signals: StopSignals, asked: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HIFI_EVENT_LOOP picks the loop; unset, a daemon runs on uvloop (a dependency)."""
    monkeypatch.setenv(EVENT_LOOP_ENV, asked)
    ran_on: list[str] = []

    async def run() -> None:
        ran_on.append(type(asyncio.get_running_loop()).__module__)

    run_daemon(run, lambda: None)
    assert ran_on == [module]


def test_an_unknown_event_loop_is_a_usage_error_before_the_daemon_starts(
    fresh_stop_signals: StopSignals, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "trio")
    started: list[bool] = []

    async def run() -> None:
        started.append(True)

    with pytest.raises(
        errors.ConfigError, match=r"^HIFI_EVENT_LOOP='trio': use one of uvloop, asyncio$"
    ):
        run_daemon(run, lambda: None)
    assert started == []


def test_a_daemon_hands_freed_memory_back_while_it_runs(
    fresh_stop_signals: StopSignals, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_daemon` keeps a release task beside the daemon's work, and ends it with the run."""
    monkeypatch.setattr(memory, "RELEASE_EVERY_S", 0.01)
    seconds = "hifi_memory_release_seconds_total"
    before = prometheus_client.REGISTRY.get_sample_value(seconds) or 0.0
    seen: list[str] = []

    async def run() -> None:
        seen.extend(t.get_name() for t in asyncio.all_tasks())
        async with asyncio.timeout(30):
            while (prometheus_client.REGISTRY.get_sample_value(seconds) or 0.0) == before:
                await asyncio.sleep(0.01)

    run_daemon(run, lambda: None)
    assert "memory-release" in seen
    assert (prometheus_client.REGISTRY.get_sample_value(seconds) or 0.0) > before


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_a_daemon_has_its_threads_from_the_start_and_none_after(
    fresh_stop_signals: StopSignals, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the daemon's first line runs, its `WORKER_THREADS` are started and its jobs in
    threads run on them; once the run ends they are joined, on either event loop."""
    monkeypatch.setenv(EVENT_LOOP_ENV, kind)
    seen: list[int] = []
    ran_on: list[str] = []

    def workers() -> int:
        return sum(1 for t in threading.enumerate() if t.name.startswith("hifi-worker"))

    async def run() -> None:
        seen.append(workers())
        ran_on.append(await asyncio.to_thread(lambda: threading.current_thread().name))

    run_daemon(run, lambda: None)
    assert seen == [WORKER_THREADS]
    assert ran_on[0].startswith("hifi-worker")
    assert workers() == 0
