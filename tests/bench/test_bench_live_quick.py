"""The short version of `make bench`'s lag phase: paced probes, the floor and fixed concurrency."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import live
from bench.report import Row

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_lag_probes_measure_every_offer_and_both_references(tmp_path: Path) -> None:
    """Each offered probe, the intake-only floor and the fixed-concurrency connector deliver
    every event they were offered, and each has a measured p95."""
    rows: list[Row] = []
    results, references, peak_rss_kb = await live.lag_probes(
        tmp_path, [("lag @small", 500.0)], 500.0, rows, partitions=2, probe_s=2.0
    )
    probes = [*results, references.floor, references.fixed]
    for probe in probes:
        assert probe.offered.events > 0
        assert probe.delivered >= probe.offered.events, probe.label
        assert probe.lag.p95_ms > 0
    assert [row.phase for row in rows][-1].startswith("lag @50%, concurrency fixed")
    assert peak_rss_kb > 0
