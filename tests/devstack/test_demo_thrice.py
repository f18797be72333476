"""`make demo` three times in a row (a short version: fewer events) each ends `auditor: OK`.

Every run starts a fresh broker, which creates every topic again, `hifi.audit` included, from
offset 0, while the auditor's archive in `.demo/` is kept: its snapshots remember offsets of
topics that are gone (`auditor/audit_reading.py`, `auditor/epochs.py`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS = 3
EVENTS = 1_000
RUN_TIMEOUT_S = 240  # a run waits for a minute of its own, then for that minute to settle

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_three_demos_in_a_row_each_agree_with_the_auditor(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for run in range(1, RUNS + 1):
        done = subprocess.run(
            [sys.executable, "-m", "devstack.demo", "--events", str(EVENTS)],
            cwd=tmp_path,  # .demo/ (the archive) is kept from one run to the next
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        tail = "\n".join(done.stdout.splitlines()[-25:])
        assert done.returncode == 0, f"run {run}:\n{tail}\n{done.stderr[-2000:]}"
        assert "demo: OK, every event accounted for" in done.stdout, f"run {run}:\n{tail}"
        assert "auditor: OK, it agrees with the demo's account" in done.stdout, (
            f"run {run}:\n{tail}"
        )
    assert (tmp_path / ".demo" / "archive").is_dir()  # one archive, kept across the runs
