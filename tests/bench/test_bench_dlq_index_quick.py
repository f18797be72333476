"""The short version of `python -m bench.dlq_index`: 20,000 letters, every query timed, the summary line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # runs the bench as a process

LETTERS = 20_000
_LINE = re.compile(
    r"^bench-dlq-index: letters=(\d+) list_ms=(\d+) count_ms=(\d+) text_count_ms=(\d+)"
    r" find_ms=(\d+) rss_mb=(\d+)$"
)


def test_quick_run_indexes_every_letter_and_ends_with_the_summary_line(tmp_path: Path) -> None:
    """All letters are indexed (the bench checks the count and that the token is masked), the
    spill goes where it is told, and the summary line carries measured figures."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.dlq_index",
            "--letters",
            str(LETTERS),
            "--spill-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found = _LINE.match(run.stdout.strip().splitlines()[-1])
    assert found, run.stdout
    letters, *_, rss_mb = map(int, found.groups())
    assert letters == LETTERS
    assert rss_mb > 0
    assert (tmp_path / "text.bin").stat().st_size > LETTERS * 1024  # a KB of body per letter
