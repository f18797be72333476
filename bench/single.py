"""`make bench`'s single-event phase: what one event per request (`format = "single"`, the webhook
receivers' convention, docs/webhooks.md) costs against `json_array` batches.

The connector drains the same pre-filled events twice, each on a fresh broker: once in single
format, once in `json_array` at the defaults, in `PAIRS` pairs of alternating order. `single_eps`
is the median single drain's events/s, `single_over_array` the median pair's ratio. A single
drain sends a request per event, so it is bound by the connector's CPU per request, not per
event; fewer events than the other phases keep it short.

    .venv/bin/python -m bench.single [--events 40000]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from bench import machine, phases
from bench.report import Row, say

EVENTS = 40_000
PARTITIONS = 4
PAIRS = 2


@dataclass(frozen=True)
class SinglePair:
    single: phases.Throughput
    array: phases.Throughput
    single_cores: tuple[float, float]  # (the bench's processes, everything else)
    array_cores: tuple[float, float]

    @property
    def ratio(self) -> float:
        array = self.array.events_per_s
        return self.single.events_per_s / array if array else 0.0


@dataclass(frozen=True)
class SingleCost:
    pairs: list[SinglePair]

    @property
    def single_eps(self) -> float:
        return statistics.median_low(p.single.events_per_s for p in self.pairs)

    @property
    def single_over_array(self) -> float:
        return statistics.median_low(p.ratio for p in self.pairs)

    def rows(self, events: int) -> list[Row]:
        median = min(self.pairs, key=lambda p: abs(p.single.events_per_s - self.single_eps))
        return [
            Row("single format, 1 event a request", None, events, median.single.delivered,
                median.single.events_per_s, *median.single_cores),
            Row("  json_array, same events", None, events, median.array.delivered,
                median.array.events_per_s, *median.array_cores),
        ]  # fmt: skip

    def report(self) -> dict[str, object]:
        return {
            "single_eps": self.single_eps,
            "single_over_array": self.single_over_array,
            "pairs": [asdict(pair) for pair in self.pairs],
        }


async def _drain(
    work: Path, events: int, body_format: str
) -> tuple[phases.Throughput, tuple[float, float]]:
    topic = f"single.{body_format}"
    watch = machine.CpuWatch()
    drained = await phases.fresh_drain(
        work / body_format,
        topic=topic,
        prefix=topic,
        events=events,
        partitions=PARTITIONS,
        body_format=body_format,
    )
    if drained.delivered < events:
        raise RuntimeError(f"{body_format}: {drained.delivered} of {events} delivered")
    return drained, watch.cores()


async def run_phase(work: Path, events: int = EVENTS, pairs: int = PAIRS) -> SingleCost:
    """`pairs` pairs of a single drain and a `json_array` drain of `events` events."""
    measured = []
    for index in range(pairs):
        say(f"8. single format against json_array, {events} events ({index + 1} of {pairs})")
        order = ("single", "json_array") if index % 2 == 0 else ("json_array", "single")
        runs = {name: await _drain(work / f"pair{index}", events, name) for name in order}
        (single, single_cores), (array, array_cores) = runs["single"], runs["json_array"]
        measured.append(SinglePair(single, array, single_cores, array_cores))
        say(f"   single {single.events_per_s:.0f}/s, json_array {array.events_per_s:.0f}/s")
    return SingleCost(measured)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--events", type=click.IntRange(1000), default=EVENTS, show_default=True)
@click.option("--pairs", type=click.IntRange(1, 10), default=PAIRS, show_default=True)
def main(events: int, pairs: int) -> None:
    """The single phase alone; the last line its figures."""
    with tempfile.TemporaryDirectory(prefix="hifi-bench-single-") as tmp:
        cost = asyncio.run(run_phase(Path(tmp), events, pairs))
    print(
        f"single: single_eps={cost.single_eps:.0f} single_over_array={cost.single_over_array:.3f}"
    )


if __name__ == "__main__":
    main()
