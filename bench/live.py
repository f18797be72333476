"""The bench's live phases: offered load on a fresh broker per probe, its end-to-end lag.

`scale_search` bisects for the highest rate whose p95 stays under 1 s with 1 % of requests
answered 503; `lag_probes` offers fixed shares of the measured maximum without faults, then at
half of it pairs of the floor (the intake alone) and the connector, and the connector with fixed
concurrency.
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
# pairs of the floor and the connector at half load, alternated; the median difference counts:
# five, as one probe in a run of the full bench is often several times its neighbours
FLOOR_PAIRS = 5


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
    floor_pairs: int = FLOOR_PAIRS,
) -> tuple[list[phases.LiveResult], LiveReferences, int]:
    """Live probes without faults, one fresh broker and topic each; then, at `half_rate`,
    `floor_pairs` pairs of the floor and the connector in alternating order, and the connector
    with `concurrency = "fixed"` (adaptive is the default)."""
    results: list[phases.LiveResult] = []
    pairs: list[FloorPair] = []
    async with phases.LiveSession(
        work / "live",
        topics=[f"bench.live{i}" for i in range(len(offers) + 2 * floor_pairs)],
        partitions=partitions,
    ) as session:
        for index, (label, rate) in enumerate(offers):
            result, row = await measured_probe(session, label, index, rate, probe_s)
            results.append(result)
            rows.append(row)
        index = len(offers)
        for number in range(floor_pairs):
            measured: dict[bool, phases.LiveResult] = {}
            for floor in (True, False) if number % 2 == 0 else (False, True):
                what = "floor: intake only, no HTTP" if floor else "lag @50%, against the floor"
                label = f"{what} @{half_rate:.0f}/s, pair {number + 1}"
                measured[floor], row = await measured_probe(
                    session, label, index, half_rate, probe_s, floor=floor
                )
                index += 1
                rows.append(row)
            pairs.append(FloorPair(floor=measured[True], connector=measured[False]))
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
    return results, LiveReferences(tuple(pairs), fixed), peak_rss_kb


@dataclass(frozen=True)
class FloorPair:
    """The floor and the connector at the same offered rate, one probe after the other."""

    floor: phases.LiveResult
    connector: phases.LiveResult

    @property
    def p95_over_floor_ms(self) -> float:
        return self.connector.lag.p95_ms - self.floor.lag.p95_ms


@dataclass(frozen=True)
class LiveReferences:
    """What the lag at half load is read against: the intake alone, paired with the connector
    probe by probe, and fixed concurrency."""

    floor_pairs: tuple[FloorPair, ...]
    fixed: phases.LiveResult

    @property
    def median_pair(self) -> FloorPair:
        """The pair with the median difference (the lower of the middle two): one probe's p95
        moves by tens of milliseconds with the machine, a difference taken back to back less."""
        ranked = sorted(self.floor_pairs, key=lambda pair: pair.p95_over_floor_ms)
        return ranked[(len(ranked) - 1) // 2]

    @property
    def floor(self) -> phases.LiveResult:
        return self.median_pair.floor

    @property
    def p95_over_floor_ms(self) -> float:
        return self.median_pair.p95_over_floor_ms

    def report(self) -> list[dict[str, float]]:
        return [
            {
                "floor_p95_ms": pair.floor.lag.p95_ms,
                "connector_p95_ms": pair.connector.lag.p95_ms,
                "p95_over_floor_ms": pair.p95_over_floor_ms,
            }
            for pair in self.floor_pairs
        ]
