"""`python -m soak` stopped by SIGTERM takes its broker, Redis and daemons with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--duration", "5m", "--rate", "50", "--faults", "2", "--settle-s", "10"]


def _in_session(session_id: int) -> list[str]:
    """The command lines of every live process of `session_id` but its leader."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        pid = int(stat.parent.name)
        if int(fields[3]) == session_id and pid != session_id and fields[0] != "Z":
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
            found.append(cmdline.decode(errors="replace").strip())
    return found


@pytest.mark.timeout(240)
def test_a_soak_stopped_by_sigterm_leaves_no_process_behind(tmp_path: Path) -> None:
    soak = subprocess.Popen(
        [sys.executable, "-m", "soak", *ARGS, "--results-dir", str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its children share its session: found after it ends
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert soak.stdout is not None
        lines = []
        for line in soak.stdout:
            lines.append(line)
            if "soak: 5 min at" in line:
                break
        else:
            pytest.fail("the soak ended before its load began:\n" + "".join(lines))
        # every daemon answered /readyz before that line: all are processes of the session
        assert len(_in_session(soak.pid)) >= 8, _in_session(soak.pid)
        soak.send_signal(signal.SIGTERM)
        rest, _ = soak.communicate(timeout=120)
        assert soak.returncode == 143, "".join(lines) + rest
        assert "soak stopped; logs kept in" in rest
        assert _in_session(soak.pid) == []
    finally:
        if soak.poll() is None or _in_session(soak.pid):
            os.killpg(soak.pid, signal.SIGKILL)  # a failed run's leftovers
        soak.wait()
