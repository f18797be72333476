"""The short version of `make bench`'s lag phase: paced probes, the floor and fixed concurrency."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from bench import live, processes
from bench.floor import READY_LINE
from bench.report import Row

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_lag_probes_measure_every_offer_and_both_references(tmp_path: Path) -> None:
    """Each offered probe, each pair of the intake-only floor and the connector (in alternating
    order) and the fixed-concurrency connector deliver every event they were offered, and each
    has a measured p95; the lower middle pair's difference is the one reported."""
    rows: list[Row] = []
    results, references, peak_rss_kb = await live.lag_probes(
        tmp_path, [("lag @small", 500.0)], 500.0, rows, partitions=2, probe_s=2.0, floor_pairs=2
    )
    pairs = references.floor_pairs
    probes = [*results, *(p.floor for p in pairs), *(p.connector for p in pairs), references.fixed]
    for probe in probes:
        assert probe.offered.events > 0
        assert probe.delivered >= probe.offered.events, probe.label
        assert probe.lag.p95_ms > 0
    phases = [row.phase for row in rows]
    assert phases[-1].startswith("lag @50%, concurrency fixed")
    # alternated: the floor first in the first pair, the connector first in the second
    assert [phase.split(":")[0].split(" @")[0] for phase in phases[1:5]] == [
        "floor",
        "lag",
        "lag",
        "floor",
    ]
    assert references.p95_over_floor_ms == min(p.p95_over_floor_ms for p in pairs)
    assert peak_rss_kb > 0


async def test_a_second_floor_is_ready_only_when_it_has_its_partitions(tmp_path: Path) -> None:
    """Floors share a work directory: the ready line an earlier floor wrote is not the next
    one's (it was, and the load started while the second floor still joined its group)."""
    log = tmp_path / "floor.log"
    log.write_bytes(f"{READY_LINE}\n".encode())
    floor = processes.FloorProcess(
        bootstrap="127.0.0.1:1", topic="t", deliveries_file=tmp_path / "d.ndjson", log_path=log
    )
    floor.start()
    try:
        assert not await floor.is_ready()
    finally:
        with contextlib.suppress(RuntimeError):  # no broker: it may have exited non-zero
            floor.stop()
