"""The short versions of `make bench`'s phases that run alone: one pair of drains each, every
event delivered (each bench raises otherwise), the summary line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # runs the bench as a process


@pytest.mark.parametrize(
    ("module", "line"),
    [
        # one event a request against json_array: slower than batches of 500
        ("bench.single", r"^single: single_eps=(\d+) single_over_array=(0\.\d+)$"),
        # Avro with [decode] against the same events as JSON: delivered under their ids
        ("bench.decode_cost", r"^decode: avro_over_json=(\d+\.\d+)$"),
    ],
)
def test_quick_run_drains_both_and_ends_with_the_summary_line(module: str, line: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", module, "--events", "2000", "--pairs", "1"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found = re.match(line, run.stdout.strip().splitlines()[-1])
    assert found, run.stdout[-2000:]
    assert float(found[1]) > 0
