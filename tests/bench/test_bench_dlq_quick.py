"""The short version of `make bench-dlq`: a real broker and retrier, 5,000 letters, a replay of
all of them while hand-offs come due in the tiers, and the summary line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LETTERS = 5_000
_LINE = re.compile(
    r"^bench-dlq: letters=(\d+) list_ms=(\d+) count_ms=(\d+) rss_mb=(\d+)"
    r" replay_due_delay_ms=(\d+)$"
)


def test_quick_run_replays_every_chosen_letter_and_times_the_tiers(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.dlq",
            "--letters",
            str(LETTERS),
            "--replay",
            str(LETTERS),
            "--handoffs",
            "200",
            "--work",
            str(tmp_path / "work"),
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found = _LINE.match(run.stdout.strip().splitlines()[-1])
    assert found, run.stdout
    letters, list_ms, count_ms, rss_mb, _ = map(int, found.groups())
    assert (letters, list_ms > 0, count_ms > 0, rss_mb > 0) == (LETTERS, True, True, True)
    (written,) = tmp_path.glob("dlq-*.json")
    result = orjson.loads(written.read_bytes())
    # the dry run counted what was then replayed, and every replayed letter reached retry_out
    assert result["dry_run_count"] == result["replayed"] == result["replayed_in_topic"] == LETTERS
    assert result["due_during_replay"] > 0  # tier events came due while the replay ran
