"""The short version of `make bench`'s lookup phase: a private Redis, 1,000 tenants, Redis up then stopped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.lookups import QUICK, SMALL_BATCH_RECORDS, TENANTS
from bench.run import summary_line

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_LINE = re.compile(
    r"^bench-lookups: lookup_ratio=(\d+\.\d\d) p95_redis_up_ms=(\d+) p95_redis_down_ms=(\d+)$"
)


def test_quick_run_delivers_everything_with_redis_up_and_stopped(tmp_path: Path) -> None:
    """Every event of the drain and of both probes is delivered; the probe with Redis stopped
    started from the snapshot; the ratio and both p95s are measured, not zero."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.lookups", "--quick", "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    last = run.stdout.strip().splitlines()[-1]
    found = _LINE.match(last)
    assert found, last
    ratio, up_ms, down_ms = float(found.group(1)), int(found.group(2)), int(found.group(3))
    assert ratio > 0
    assert up_ms > 0
    assert down_ms > 0
    [path] = tmp_path.glob("bench-lookups-*.json")
    report = orjson.loads(path.read_bytes())
    assert report["summary"] == last
    assert report["tenants"] == TENANTS
    assert report["down_from_snapshot"] is True
    runs = report["runs"]
    assert runs["drain"]["delivered"] == QUICK.events
    assert runs["drain"]["requests"] > 0
    small = runs["small_drain"]  # the CPU-per-request fit's second point: smaller requests
    assert small["delivered"] == QUICK.events
    assert small["requests"] >= QUICK.events / SMALL_BATCH_RECORDS
    assert "cpu_per_request_us" in report
    for probe in ("up", "down"):
        assert runs[probe]["delivered"] == runs[probe]["offered"]["events"] > 0


def test_the_bench_summary_ends_with_the_lookup_fields() -> None:
    """`make bench`'s last line carries the lookup phase's three figures."""
    line = summary_line(
        0.47, 53, 77526, 143, lookups="lookup_ratio=0.31 p95_redis_up_ms=60 p95_redis_down_ms=64"
    )
    assert line == (
        "bench: ratio=0.47 p95_at_half_ms=53 scale_rating_msgs=77526 rss_mb=143"
        " lookup_ratio=0.31 p95_redis_up_ms=60 p95_redis_down_ms=64"
    )
