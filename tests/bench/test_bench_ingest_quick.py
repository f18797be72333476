"""The short version of `make bench-ingest`: wrk against the ingest service, beside the producer ceiling."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.ingest_wrk import wrk_missing

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_LINE = re.compile(
    r"^bench-ingest: single_rps=(\d+) batch100_eps=(\d+)"
    r" batch100_over_ceiling=(\d+\.\d\d) p95_at_half_ms=(\d+)$"
)


def test_quick_run_measures_every_load_on_both_brokers_without_errors(tmp_path: Path) -> None:
    """Every load (1, 100, 1,000 events per request, half load, the slowed broker) is answered
    2xx throughout, its rate, percentiles and the ingest process's CPU measured; the summary
    line and the JSON agree."""
    missing = wrk_missing()
    if missing:
        pytest.skip(missing)
    run = subprocess.run(
        [sys.executable, "-m", "bench.ingest", "--quick", "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    last = run.stdout.strip().splitlines()[-1]
    found = _LINE.match(last)
    assert found, last
    assert int(found.group(1)) > 0
    assert int(found.group(2)) > 0
    assert float(found.group(3)) > 0
    [path] = tmp_path.glob("bench-ingest-*.json")
    report = orjson.loads(path.read_bytes())
    assert report["summary"] == last
    for phase in ("plain", "slowed"):
        assert report[phase]["ceiling_events_per_s"] > 0
        for batch in ("1", "100", "1000"):
            load = report[phase]["loads"][batch]
            assert load["errors"] == 0, (phase, batch, load)
            assert load["requests"] > 0
            assert 0 < load["p50_us"] <= load["p95_us"] <= load["p99_us"]
            assert load["cpu_ms_per_1000_events"] > 0
    assert report["slowed"]["delay_ms_each_way"] > 0
    half = report["plain"]["half"]
    assert half["errors"] == 0
    # paced: the half-load run offers about half the 100-event rate, and gets no more
    assert half["rps"] <= half["offered_rps"] * 1.1
    assert set(report["targets"]) == {"single_rps", "batch100_over_ceiling", "p95_at_half_ms"}
