"""A daemon stopped by SIGTERM at any instant after its start, even while it still imports or
joins its group, exits 0 within its drain deadline, never killed by the signal (-15)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import write_destination

pytestmark = [pytest.mark.integration]  # real daemons against the session's broker

DRAIN_S = 5.0  # the destination's shutdown_timeout_s
# bounds a hang, not a speed: a start on a loaded machine, then the drain
EXIT_BOUND_S = 60.0 + DRAIN_S
MODULES = {"connector": "connector", "retrier": "retrier", "auditor": "auditor"}
EARLIEST_S = 0.1
_SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def _daemon_args(prog: str, dest: str, catalog: Path, archive: Path) -> list[str]:
    args = ["--dest", dest, "--catalog", str(catalog), "--metrics-port", "0"]
    if prog == "auditor":
        args += ["--archive", str(archive)]
    return [*args, "--log-format", "json"]


def _catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGTERM (its SigCgt mask, /proc/PID/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & _SIGTERM_BIT)


def _wait_for_handler(process: subprocess.Popen[bytes], log: Path) -> None:
    """Until the command's `main()` has caught the stop signals: its first line, before any
    heavy import (some 70 ms after exec here; on a loaded machine the signal could otherwise
    come before the interpreter has read the command's first line)."""
    deadline = time.monotonic() + EXIT_BOUND_S
    while not _catches_sigterm(process.pid):
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the daemon never installed its SIGTERM handler"
        time.sleep(0.005)


@pytest.mark.parametrize("delay_s", [EARLIEST_S, 0.5, 1.0])
@pytest.mark.parametrize("prog", MODULES)
def test_sigterm_soon_after_start_exits_0(
    prog: str,
    delay_s: float,
    kafka_bootstrap: str,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """SIGTERM `delay_s` after the start (importing, loading the catalog, connecting or
    joining): the daemon drains what it has, exits 0 and prints no traceback."""
    write_destination(
        catalog_dir,
        unique,
        url="http://127.0.0.1:9/",
        source_topics=[unique],
        shutdown_timeout_s=DRAIN_S,
        internal_topic_partitions=1,
    )
    log = tmp_path / "daemon.log"
    args = _daemon_args(prog, unique, catalog_dir, tmp_path / "archive")
    with log.open("wb") as out:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", MODULES[prog], *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": kafka_bootstrap},
        )
    processes.append(process)
    _wait_for_handler(process, log)
    time.sleep(max(0.0, started + delay_s - time.monotonic()))
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=EXIT_BOUND_S)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text
    if delay_s == EARLIEST_S:  # still importing then: ended before the daemon ever started
        assert '"event": "stopped_before_start"' in text, text
        assert "kafka_connecting" not in text
