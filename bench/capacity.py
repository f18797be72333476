"""The capacity phase of `make bench`: adaptive against fixed concurrency, at a limited destination.

A destination (`bench.capacity_server`, its own process) serves at most N requests at once, each
for `service_ms`, and answers 503 at once beyond them. The connector's HTTP path drives it: its
`Deliverer` (local retries, back-pressure classification) and its `Limiter`, with units of work
started while fewer run than the limit says, as `PartitionWorker.dispatch()` does; batches are
made in memory, so Kafka plays no part and the figures are about concurrency control alone.

1. fixed `max_in_flight` of 1, 2, 4, ... 64 against N = 8 and N = 64: the best fixed throughput
   for each N (events/s 2xx'd over the run's steady part, after `warmup_s`; an adaptive run's
   after its climb, `CapacityPlan.ramp_s`);
2. adaptive (ceiling 64) against each N: `adaptive / best fixed` (must be >= 0.90), and at N = 8
   its p95 batch latency (first attempt to 2xx, retries included) against fixed 64's;
3. adaptive while N goes 8 -> 64 -> 8 in one run: after each change, the seconds until its
   throughput (over a sliding 2 s) is within 10 % of the best fixed for the new N (must be <= 30).

`python -m bench.capacity [--quick]` runs the phase alone; its last line is
`bench-capacity: arc_vs_best_fixed=R ...`, R being the lower ratio of the two N.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click
from aiokafka import TopicPartition

from bench import machine
from bench.memory_batches import RefusingProducer, memory_batch
from bench.report import Row, render_table, say, write_results
from config.destination import Destination
from connector.concurrency import Limiter
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.rebatch import Batch
from connector.sender import opened_sender
from hifi.errors import DestinationUnavailable
from hifi.logging import configure_logging

FIXED = (1, 2, 4, 8, 16, 32, 64)
CAPACITIES = (8, 64)
CEILING = 64
EVENTS_PER_BATCH = 10
TARGET_SHARE = 0.90  # adaptive over best fixed, per N
SWITCH_WITHIN_S = 30.0
SWITCH_SHARE = 0.90  # "within 10 %" of the best fixed for the new N
SLIDING_S = 2.0
RESULTS_DIR = Path(__file__).parent / "results"
_TP = TopicPartition("bench.capacity", 0)
_READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CapacityPlan:
    """How long each run is; `warmup_s` is left out of every run's figures alike, and an adaptive
    run is `ramp_s` longer, measured over its last `run_s - warmup_s` like a fixed one: its
    steady state, after the climb from a limit of 1 (about +1 per two or three RTTs). The climb
    itself is what the 8 -> 64 -> 8 run measures."""

    run_s: float
    warmup_s: float
    ramp_s: float
    switch_step_s: float  # each N of the 8 -> 64 -> 8 run
    service_ms: float = 100.0


FULL = CapacityPlan(run_s=30.0, warmup_s=10.0, ramp_s=30.0, switch_step_s=45.0)
QUICK = CapacityPlan(run_s=12.0, warmup_s=7.0, ramp_s=25.0, switch_step_s=40.0)


@dataclass
class Run:
    """One run: when each batch was 2xx'd (s since the run began) and how long it took."""

    label: str
    done_s: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    failed_batches: int = 0
    requests: int = 0
    final_limit: int = 0

    def events_per_s(self, start_s: float, end_s: float) -> float:
        count = bisect.bisect_left(self.done_s, end_s) - bisect.bisect_left(self.done_s, start_s)
        return count * EVENTS_PER_BATCH / (end_s - start_s) if end_s > start_s else 0.0

    def p95_ms(self, start_s: float) -> float:
        steady = sorted(
            lat for t, lat in zip(self.done_s, self.latency_s, strict=True) if t >= start_s
        )
        return steady[int(0.95 * (len(steady) - 1))] * 1000 if steady else 0.0


@dataclass(frozen=True)
class CapacityPhase:
    """What the phase measured."""

    fixed: dict[int, dict[int, float]]  # N -> max_in_flight -> events/s
    adaptive: dict[int, float]  # N -> events/s
    p95_ms: dict[str, float]  # "adaptive@8", "fixed64@8"
    switch_s: list[float | None]  # seconds to within 10 % of best fixed, after each change
    failed_batches: int

    def best_fixed(self, capacity: int) -> float:
        return max(self.fixed[capacity].values())

    @property
    def arc_vs_best_fixed(self) -> float:
        return min(self.adaptive[n] / self.best_fixed(n) for n in CAPACITIES)

    def held(self) -> bool:
        """Whether every target of the issue holds."""
        return (
            self.arc_vs_best_fixed >= TARGET_SHARE
            and self.p95_ms["adaptive@8"] < self.p95_ms["fixed64@8"]
            and all(s is not None and s <= SWITCH_WITHIN_S for s in self.switch_s)
            and self.failed_batches == 0
        )

    def fields(self) -> str:
        """What the summary line of `make bench` gains."""
        return f"arc_vs_best_fixed={self.arc_vs_best_fixed:.2f}"

    def report(self) -> dict[str, object]:
        """For the JSON results (string keys: `fixed` is by N, then by max_in_flight)."""
        fixed = {str(n): {str(k): v for k, v in by.items()} for n, by in self.fixed.items()}
        return {
            "arc_vs_best_fixed": self.arc_vs_best_fixed,
            "held": self.held(),
            "fixed_events_per_s": fixed,
            "best_fixed_events_per_s": {str(n): self.best_fixed(n) for n in CAPACITIES},
            "adaptive_events_per_s": {str(n): rate for n, rate in self.adaptive.items()},
            "p95_ms": self.p95_ms,
            "switch_s": self.switch_s,
            "failed_batches": self.failed_batches,
        }


@contextlib.asynccontextmanager
async def capacity_destination(schedule: str, service_ms: float) -> AsyncIterator[str]:
    """`bench.capacity_server` in its own process; yields its URL."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bench.capacity_server", "--schedule", schedule),
        *("--service-ms", str(service_ms)),
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), _READY_TIMEOUT_S)
        if not line.startswith(b"destination listening on "):
            raise RuntimeError(f"capacity destination did not start: {line[-300:]!r}")
        yield line.split()[-1].decode()
    finally:
        if process.returncode is None:
            await asyncio.sleep(service_ms / 1000 + 0.2)  # let requests in service finish
            process.terminate()
        await process.wait()


def _destination(url: str, max_in_flight: int, concurrency: str) -> Destination:
    return Destination(
        name="bench-capacity",
        url=url,
        source_topics=[_TP.topic],
        max_in_flight=max_in_flight,
        concurrency=concurrency,  # type: ignore[arg-type]  # "adaptive" or "fixed"
        max_batch_records=EVENTS_PER_BATCH,
        local_retry_attempts=50,  # nothing handed off: the retrier plays no part here
        local_retry_max_backoff_s=1.0,
    )


def _batch(seq: int) -> Batch:
    return memory_batch(_TP, seq, EVENTS_PER_BATCH, "c")


async def drive(url: str, label: str, *, max_in_flight: int, adaptive: bool, run_s: float) -> Run:
    """Keep batches in flight for `run_s`, as many at once as the limiter allows."""
    dest = _destination(url, max_in_flight, "adaptive" if adaptive else "fixed")
    limiter = Limiter(label, ceiling=max_in_flight, adaptive=adaptive)
    run = Run(label)
    async with opened_sender(dest) as sender:
        deliverer = Deliverer(
            sender, dest, Diverter(RefusingProducer("the capacity phase"), dest), limiter=limiter
        )
        loop = asyncio.get_running_loop()
        began = loop.time()

        async def unit(seq: int) -> None:
            started = loop.time()
            try:
                await deliverer.send_with_retries(_batch(seq))
            except DestinationUnavailable:
                run.failed_batches += 1
                return
            run.done_s.append(loop.time() - began)
            run.latency_s.append(loop.time() - started)

        running: set[asyncio.Task[None]] = set()
        seq = 0
        while loop.time() - began < run_s:
            while len(running) < min(limiter.limit(), max_in_flight):
                running.add(asyncio.create_task(unit(seq)))
                seq += 1
            done, _ = await asyncio.wait(running, timeout=0.01, return_when="FIRST_COMPLETED")
            running -= done
            for task in done:
                task.result()
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    order = sorted(range(len(run.done_s)), key=run.done_s.__getitem__)
    run.done_s = [run.done_s[i] for i in order]
    run.latency_s = [run.latency_s[i] for i in order]
    run.final_limit = limiter.limit()
    return run


def _time_to_reach(run: Run, change_s: float, end_s: float, target: float) -> float | None:
    """Seconds after `change_s` until the sliding rate first reaches `target` (None: never)."""
    t = change_s + SLIDING_S
    while t <= end_s:
        if run.events_per_s(t - SLIDING_S, t) >= target:
            return round(t - change_s, 1)
        t += 0.25
    return None


async def run_phase(plan: CapacityPlan, rows: list[Row]) -> CapacityPhase:
    """The whole phase; its rows are appended to `rows`."""
    fixed: dict[int, dict[int, float]] = {}
    adaptive: dict[int, float] = {}
    p95_ms: dict[str, float] = {}
    failed = 0
    for capacity in CAPACITIES:
        fixed[capacity] = {}
        for limit in (*FIXED, None):
            label = f"fixed {limit}" if limit else f"adaptive (ceiling {CEILING})"
            ramp_s = 0.0 if limit else plan.ramp_s
            watch = machine.CpuWatch()
            async with capacity_destination(str(capacity), plan.service_ms) as url:
                run = await drive(
                    url,
                    label,
                    max_in_flight=limit or CEILING,
                    adaptive=limit is None,
                    run_s=plan.run_s + ramp_s,
                )
            rate = run.events_per_s(plan.warmup_s + ramp_s, plan.run_s + ramp_s)
            p95 = run.p95_ms(plan.warmup_s + ramp_s)
            failed += run.failed_batches
            if limit is None:
                adaptive[capacity] = rate
                p95_ms[f"adaptive@{capacity}"] = p95
            else:
                fixed[capacity][limit] = rate
                p95_ms[f"fixed{limit}@{capacity}"] = p95
            say(
                f"   N={capacity} {label}: {rate:.0f} events/s, p95 {p95:.0f} ms, limit {run.final_limit}"
            )
            rows.append(
                Row(
                    f"capacity N={capacity}, {label}",
                    None,
                    0,
                    len(run.done_s) * EVENTS_PER_BATCH,
                    rate,
                    *watch.cores(),
                    p95_ms=p95,
                )
            )
    step = plan.switch_step_s
    schedule = f"8,64@{step:g},8@{2 * step:g}"
    say(f"   N 8 -> 64 -> 8 every {step:g} s, adaptive")
    async with capacity_destination(schedule, plan.service_ms) as url:
        switching = await drive(
            url, "adaptive, N 8->64->8", max_in_flight=CEILING, adaptive=True, run_s=3 * step
        )
    failed += switching.failed_batches
    best = {n: max(fixed[n].values()) for n in CAPACITIES}
    switch_s = [
        _time_to_reach(switching, step, 2 * step, SWITCH_SHARE * best[64]),
        _time_to_reach(switching, 2 * step, 3 * step, SWITCH_SHARE * best[8]),
    ]
    say(
        f"   to within 10 % of best fixed after 8->64: {switch_s[0]} s, after 64->8: {switch_s[1]} s"
    )
    return CapacityPhase(fixed, adaptive, p95_ms, switch_s, failed)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--quick",
    is_flag=True,
    help="Short runs (12 s each, adaptive 37 s, 40 s per N when it changes).",
)
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=RESULTS_DIR,
    show_default=True,
)
def main(quick: bool, results_dir: Path) -> None:
    """The capacity phase alone; the last line is its summary."""
    configure_logging("console", "ERROR")
    plan = QUICK if quick else FULL
    started = datetime.now(UTC)
    rows: list[Row] = []
    phase = asyncio.run(run_phase(plan, rows))
    p95 = phase.p95_ms
    summary = (
        f"bench-capacity: {phase.fields()}"
        + "".join(
            f" arc_vs_best_fixed_n{n}={phase.adaptive[n] / phase.best_fixed(n):.2f}"
            for n in CAPACITIES
        )
        + f" p95_adaptive_n8_ms={p95['adaptive@8']:.0f} p95_fixed64_n8_ms={p95['fixed64@8']:.0f}"
        + f" switch_s={','.join(str(s) for s in phase.switch_s)} held={'yes' if phase.held() else 'no'}"
    )
    report = {
        "machine": machine.describe(),
        "plan": asdict(plan),
        **phase.report(),
        "summary": summary,
    }
    path = write_results(results_dir, "bench-capacity", started, report)
    print(render_table(rows))
    print(f"results: {path}")
    print(summary)


if __name__ == "__main__":
    main()
