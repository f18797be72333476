"""Every command, given a bad configuration or an unreachable service, ends in one line and its exit code.

A daemon does not end when Kafka does not answer: it waits for it (`hifi.kafka.reach`), and
says so in one log line naming the broker; a stop request ends it, exit 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import write_destination

pytestmark = [pytest.mark.integration]  # each case is a real process of the command

MODULES = {
    "connector": "connector",
    "retrier": "retrier",
    "auditor": "auditor",
    "spark-batch": "spark_batch",
    "hifi-tenants": "tenants",
}
NOWHERE = "127.0.0.1:1"  # a port nothing listens on: connections are refused at once


def _run(prog: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", MODULES[prog], *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": NOWHERE, **env},
        check=False,
    )


def _the_line(prog: str, stderr: str) -> str:
    """The command's one line: stderr holds it and, from a daemon, JSON log records only."""
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, stderr
    assert stderr.splitlines()[-1] == lines[0], "the line ends the output"
    assert lines[0].startswith(f"{prog}"), lines[0]
    return lines[0]


@pytest.fixture
def catalog(catalog_dir: Path) -> Path:
    """A catalog with a good destination `ok`, one with a typo `bad`, and `tv` with lookups."""
    write_destination(catalog_dir, "ok", url="https://x.test/", source_topics=["e"])
    write_destination(
        catalog_dir, "bad", url="https://x.test/", source_topics=["e"], max_in_fligth=3
    )
    (catalog_dir / "tv.toml").write_text(
        'url = "https://{region}.x.test/{tenant}"\nsource_topics = ["e"]\n'
        'allow_private_destinations = true\n[lookups]\ntenant_field = "tenant"\n[headers]\nX-Api-Key = "{api_key}"\n'
    )
    return catalog_dir


DAEMON_FLAGS = ["--metrics-port", "0", "--log-format", "json"]
BAD_CONFIGURATION = {
    "connector": ["--dest", "bad", *DAEMON_FLAGS],
    "retrier": ["--dest", "bad", *DAEMON_FLAGS],
    "auditor": ["--dest", "bad", *DAEMON_FLAGS],
    "connector rewind": ["rewind", "--dest", "bad", "--to", "1h"],
    "retrier dlq list": ["dlq", "list", "--dest", "bad"],
    "hifi-tenants get": ["get", "--dest", "bad"],
}
UNREACHABLE = {
    "connector rewind": ["rewind", "--dest", "ok", "--to", "1h"],
    "retrier dlq list": ["dlq", "list", "--dest", "ok"],
    "hifi-tenants get": ["get", "--dest", "tv"],
}


@pytest.mark.parametrize("where", BAD_CONFIGURATION)
def test_bad_catalog_is_one_line_and_exit_2(where: str, catalog: Path, tmp_path: Path) -> None:
    """A catalog file with a typo'd key: `WHERE: ...bad.toml...max_in_fligth...`, exit 2."""
    prog = where.split()[0]
    args = [*BAD_CONFIGURATION[where], "--catalog", str(catalog)]
    if prog == "auditor":
        args += ["--archive", str(tmp_path / "archive")]
    run = _run(prog, *args, env={})
    line = _the_line(prog, run.stderr)
    assert run.returncode == 2, run.stderr
    assert line.startswith(f"{where}: ")
    assert "bad.toml" in line
    assert "max_in_fligth" in line


def test_spark_batch_bad_archive_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """An --archive that does not exist is refused before Spark starts: one line, exit 2,
    nothing written."""
    out = tmp_path / "out"
    run = _run(
        "spark-batch",
        *("reconcile", "--archive", str(tmp_path / "nowhere"), "--from", "2026-11-22"),
        *("--out", str(out)),
        env={},
    )
    line = _the_line("spark-batch", run.stderr)
    assert run.returncode == 2, run.stderr
    assert (
        line
        == f"spark-batch reconcile: --archive {tmp_path / 'nowhere'}: no such file or directory"
    )
    assert not out.exists()


@pytest.mark.parametrize("where", UNREACHABLE)
def test_unreachable_service_is_one_line_and_exit_1(
    where: str, catalog: Path, tmp_path: Path
) -> None:
    """Kafka (Redis for hifi-tenants) refusing connections: `WHERE: ...` naming it, exit 1."""
    prog = where.split()[0]
    args = [*UNREACHABLE[where], "--catalog", str(catalog)]
    if prog == "auditor":
        args += ["--archive", str(tmp_path / "archive")]
    run = _run(prog, *args, env={"HIFI_REDIS_URL": f"redis://{NOWHERE}"})
    line = _the_line(prog, run.stderr)
    assert run.returncode == 1, run.stderr
    assert line.startswith(f"{where}: ")
    assert NOWHERE in line


@pytest.mark.parametrize("prog", ["connector", "retrier", "auditor"])
def test_a_daemon_waits_for_kafka_and_says_so_until_stopped(
    prog: str, catalog: Path, tmp_path: Path
) -> None:
    """Kafka refusing connections: a `kafka_waiting` line naming it, no exit; SIGTERM: exit 0."""
    args = ["--dest", "ok", *DAEMON_FLAGS, "--catalog", str(catalog)]
    if prog == "auditor":
        args += ["--archive", str(tmp_path / "archive")]
    with subprocess.Popen(
        [sys.executable, "-m", MODULES[prog], *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": NOWHERE},
    ) as daemon:
        assert daemon.stderr is not None
        waiting = ""
        while '"kafka_waiting"' not in waiting:
            waiting = daemon.stderr.readline()
            assert waiting, "the daemon ended instead of waiting"
        assert NOWHERE in waiting
        assert daemon.poll() is None
        daemon.send_signal(signal.SIGTERM)
        rest = daemon.stderr.read()
        assert daemon.wait(timeout=60) == 0, rest
    assert "Traceback" not in rest
