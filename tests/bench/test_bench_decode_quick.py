"""The short version of `python -m bench.decode_cost`: a pair of drains, Avro with `[decode]`
against the same events as JSON, every event delivered, the summary line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # runs the bench as a process

_LINE = re.compile(r"^decode: avro_over_json=(\d+\.\d+)$")


def test_quick_run_drains_avro_and_json_and_ends_with_the_summary_line() -> None:
    """The bench raises unless every event of both drains arrived, so the Avro drain delivered
    the events it decoded under their ids."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.decode_cost", "--events", "2000", "--pairs", "1"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found = _LINE.match(run.stdout.strip().splitlines()[-1])
    assert found, run.stdout[-2000:]
    assert float(found[1]) > 0
