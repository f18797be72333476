"""The short version of `python -m bench.single`: a pair of drains, one event a request against
`json_array`, every event delivered, the summary line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # runs the bench as a process

_LINE = re.compile(r"^single: single_eps=(\d+) single_over_array=(\d+\.\d+)$")


def test_quick_run_drains_both_formats_and_ends_with_the_summary_line() -> None:
    """The bench raises unless every event of both drains arrived; one request an event is
    slower than batches of 500."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.single", "--events", "2000", "--pairs", "1"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found = _LINE.match(run.stdout.strip().splitlines()[-1])
    assert found, run.stdout[-2000:]
    assert int(found[1]) > 0
    assert 0 < float(found[2]) < 1
