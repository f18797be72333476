"""The bench's live phases: offered load on a fresh broker per probe, its end-to-end lag.

`scale_search` bisects for the highest rate whose p95 stays under 1 s with 1 % of requests
answered 503; `lag_probes` offers fixed shares of the measured maximum without faults, then at
half of it the floor (the intake alone) and the connector with fixed concurrency.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench import phases
from bench.measure import Probe, next_probe_rate
from bench.phases import LAG_LIMIT_MS, measured_probe
from bench.report import Row

_SEARCH_HIGH = 1.25  # the search tries up to this multiple of the measured maximum
_SEARCH_RESOLUTION = 0.1


async def scale_search(
    work: Path,
    max_rate: float,
    rows: list[Row],
    *,
    partitions: int,
    probe_s: float,
    max_probes: int,
) -> tuple[list[Probe], int]:
    """Bisect for the highest rate whose p95 stays under 1 s with 1 % of requests answered 503."""
    probes: list[Probe] = []
    async with phases.LiveSession(
        work / "scale",
        topics=[f"bench.scale{i}" for i in range(max_probes)],
        partitions=partitions,
        fault_ratio=0.01,
        fault="503",
    ) as session:
        for index in range(max_probes):
            rate = next_probe_rate(
                probes,
                LAG_LIMIT_MS,
                first=max_rate,
                high=max_rate * _SEARCH_HIGH,
                resolution=_SEARCH_RESOLUTION,
            )
            if rate is None:
                break
            label = f"scale, 1% 503 @{rate:.0f}/s"
            result, row = await measured_probe(session, label, index, rate, probe_s)
            probes.append(result.probe)
            rows.append(row)
    return probes, session.peak_rss_kb


async def lag_probes(
    work: Path,
    offers: list[tuple[str, float]],
    half_rate: float,
    rows: list[Row],
    *,
    partitions: int,
    probe_s: float,
) -> tuple[list[phases.LiveResult], LiveReferences, int]:
    """Live probes without faults, one fresh broker and topic each; then, at `half_rate`, the
    floor and the connector with `concurrency = "fixed"` (adaptive is the default)."""
    results: list[phases.LiveResult] = []
    async with phases.LiveSession(
        work / "live",
        topics=[f"bench.live{i}" for i in range(len(offers) + 1)],
        partitions=partitions,
    ) as session:
        for index, (label, rate) in enumerate(offers):
            result, row = await measured_probe(session, label, index, rate, probe_s)
            results.append(result)
            rows.append(row)
        label = f"floor: intake only, no HTTP @{half_rate:.0f}/s"
        floor, row = await measured_probe(
            session, label, len(offers), half_rate, probe_s, floor=True
        )
        rows.append(row)
    async with phases.LiveSession(
        work / "live-fixed",
        topics=["bench.live-fixed"],
        partitions=partitions,
        concurrency="fixed",
    ) as fixed_session:
        label = f"lag @50%, concurrency fixed @{half_rate:.0f}/s"
        fixed, row = await measured_probe(fixed_session, label, 0, half_rate, probe_s)
        rows.append(row)
    peak_rss_kb = max(session.peak_rss_kb, fixed_session.peak_rss_kb)
    return results, LiveReferences(floor, fixed), peak_rss_kb


@dataclass(frozen=True)
class LiveReferences:
    """What the lag at half load is read against: the intake alone, and fixed concurrency."""

    floor: phases.LiveResult
    fixed: phases.LiveResult
