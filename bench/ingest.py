"""`make bench-ingest`: the ingest service under wrk on loopback, against a bare producer's ceiling.

On a fresh Tansu broker (4 partitions): the ceiling first, hifi's producer (aiokafka, acks=all)
writing events of the same size as fast as they are acknowledged (`bench.ingest_service`); then
`python -m ingest` driven by wrk (`bench.ingest_wrk`) with 1, 100 and 1,000 NDJSON events per
request, each for `duration_s`, and 100-event requests paced at half the rate just measured.
Then the same on a broker slowed by a proxy that holds every chunk `delay_ms` each way
(`devstack.tcp_proxy`: netem is not in this kernel). The ingest process's CPU is read from
/proc/PID/stat before and after each run (`cpu_ms_per_1000_events`).

`python -m bench.ingest [--quick]`; its last line is
`bench-ingest: single_rps=R batch100_eps=E batch100_over_ceiling=C p95_at_half_ms=L`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import click

from bench import ingest_service, ingest_wrk, machine
from bench.measure import read_cpu_s
from bench.report import Row, render_table, say, write_results
from devstack.broker import LocalBroker
from devstack.ports import free_port
from devstack.tcp_proxy import TcpProxy
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from hifi.logging import configure_logging

RESULTS_DIR = Path(__file__).parent / "results"
HALF = 0.5
TARGETS = {"single_rps": 3000.0, "batch100_over_ceiling": 0.5, "p95_at_half_ms": 50.0}


@dataclass(frozen=True)
class IngestPlan:
    """How big the run is; `loads`: (events per request, wrk connections)."""

    duration_s: float
    warmup_s: float
    ceiling_events: int
    partitions: int
    delay_ms: float
    pad_bytes: int
    loads: tuple[tuple[int, int], ...] = ((1, 128), (100, 16), (1000, 4))


FULL = IngestPlan(
    duration_s=15, warmup_s=3, ceiling_events=300_000, partitions=4, delay_ms=5, pad_bytes=200
)
QUICK = IngestPlan(
    duration_s=2, warmup_s=1, ceiling_events=20_000, partitions=2, delay_ms=5, pad_bytes=200
)


@dataclass(frozen=True)
class Load:
    """One wrk run and what the ingest process spent on it."""

    run: ingest_wrk.WrkRun
    ingest_cpu_s: float
    cores: tuple[float, float]

    @property
    def cpu_ms_per_1000_events(self) -> float | None:
        events = self.run.events
        return self.ingest_cpu_s / events * 1e6 if events else None

    def row(self, label: str) -> Row:
        run = self.run
        return Row(
            f"{label}: {run.batch} per request, {run.connections} conn",
            run.offered_rps,
            run.events,
            run.events,
            run.events_per_s,
            *self.cores,
            p50_ms=run.p50_us / 1000,
            p95_ms=run.p95_us / 1000,
            p99_ms=run.p99_us / 1000,
        )

    def report(self) -> dict[str, object]:
        return {
            **asdict(self.run),
            "rps": self.run.rps,
            "events_per_s": self.run.events_per_s,
            "ingest_cpu_s": self.ingest_cpu_s,
            "cpu_ms_per_1000_events": self.cpu_ms_per_1000_events,
            "cores": list(self.cores),
        }


@dataclass(frozen=True)
class BrokerPhase:
    """The ceiling and the loads on one broker, plain or slowed."""

    label: str
    delay_ms: float
    ceiling_events_per_s: float
    loads: dict[int, Load]  # by events per request
    half: Load | None

    def over_ceiling(self, batch: int) -> float | None:
        load = self.loads.get(batch)
        if load is None or not self.ceiling_events_per_s:
            return None
        return load.run.events_per_s / self.ceiling_events_per_s

    def report(self) -> dict[str, object]:
        return {
            "delay_ms_each_way": self.delay_ms,
            "ceiling_events_per_s": self.ceiling_events_per_s,
            "loads": {str(batch): load.report() for batch, load in self.loads.items()},
            "over_ceiling": {str(batch): self.over_ceiling(batch) for batch in self.loads},
            "half": None if self.half is None else self.half.report(),
        }


@contextlib.asynccontextmanager
async def _broker(work: Path, delay_ms: float) -> AsyncIterator[KafkaSettings]:
    """A fresh broker; with `delay_ms`, behind a delaying proxy it advertises."""
    if not delay_ms:
        with LocalBroker(log_path=work / "broker.log") as broker:
            yield KafkaSettings(bootstrap=broker.bootstrap)
        return
    proxy_port = free_port()
    with LocalBroker(advertised_port=proxy_port, log_path=work / "broker.log") as broker:
        async with TcpProxy("127.0.0.1", broker.port, port=proxy_port, delay_ms=delay_ms):
            yield KafkaSettings(bootstrap=f"127.0.0.1:{proxy_port}")


async def _load(
    plan: IngestPlan,
    service: ingest_service.Service,
    work: Path,
    batch: int,
    connections: int,
    label: str,
    rate_rps: float | None = None,
) -> Load:
    watch = machine.CpuWatch()
    cpu_before = read_cpu_s(service.pid) or 0.0
    run = await asyncio.to_thread(
        ingest_wrk.run,
        service.url,
        service.token,
        work=work,
        batch=batch,
        connections=connections,
        duration_s=plan.duration_s,
        pad_bytes=plan.pad_bytes,
        label=label,
        rate_rps=rate_rps,
    )
    cpu_after = read_cpu_s(service.pid)
    if cpu_after is None:
        raise RuntimeError(f"ingest exited during {label}: see {service.log_path}")
    return Load(run, cpu_after - cpu_before, watch.cores())


async def run_phase(plan: IngestPlan, work: Path, delay_ms: float, rows: list[Row]) -> BrokerPhase:
    """The ceiling, then each load, then (plain broker only) 100 per request at half load."""
    label = f"slowed {delay_ms:g} ms" if delay_ms else "plain"
    work.mkdir(parents=True, exist_ok=True)
    async with _broker(work, delay_ms) as settings:
        topic, ceiling_topic = "bench.ingest", "bench.ceiling"
        await kafka_admin.ensure_topics(
            settings, [topic, ceiling_topic], partitions=plan.partitions
        )
        say(f"{label}: the ceiling, {plan.ceiling_events} events by a bare producer (acks=all)")
        watch = machine.CpuWatch()
        ceiling = await ingest_service.producer_ceiling(
            settings,
            ceiling_topic,
            events=plan.ceiling_events,
            pad_bytes=plan.pad_bytes,
            label=f"ceiling-{delay_ms:g}",
        )
        rows.append(
            Row(
                f"{label}: producer ceiling",
                None,
                plan.ceiling_events,
                plan.ceiling_events,
                ceiling,
                *watch.cores(),
            )
        )
        say(f"{label}: ceiling {ceiling:,.0f} events/s")
        async with ingest_service.serving(work / "ingest", settings, topic) as service:
            await asyncio.to_thread(
                ingest_wrk.run,
                service.url,
                service.token,
                work=work,
                batch=1,
                connections=16,
                duration_s=plan.warmup_s,
                pad_bytes=plan.pad_bytes,
                label=f"warmup-{delay_ms:g}",
            )
            loads: dict[int, Load] = {}
            for batch, connections in plan.loads:
                tag = f"b{batch}-{delay_ms:g}"
                load = await _load(plan, service, work, batch, connections, tag)
                loads[batch] = load
                rows.append(load.row(label))
                say(
                    f"{label}: {batch} per request: {load.run.rps:,.0f} requests/s,"
                    f" {load.run.events_per_s:,.0f} events/s, p95 {load.run.p95_us / 1000:.1f} ms,"
                    f" {load.run.errors} errors"
                )
            half = None
            if not delay_ms and 100 in loads:
                rate = loads[100].run.rps * HALF
                half = await _load(plan, service, work, 100, 16, f"half-{delay_ms:g}", rate)
                rows.append(half.row(f"{label}, half load"))
                say(
                    f"{label}: half load ({rate:,.0f}/s offered): p95 {half.run.p95_us / 1000:.1f} ms"
                )
    return BrokerPhase(label, delay_ms, ceiling, loads, half)


def summary_line(plain: BrokerPhase) -> str:
    single = plain.loads[1].run.rps if 1 in plain.loads else 0.0
    batch = plain.loads[100].run.events_per_s if 100 in plain.loads else 0.0
    over = plain.over_ceiling(100) or 0.0
    p95_ms = plain.half.run.p95_us / 1000 if plain.half is not None else 0.0
    return (
        f"bench-ingest: single_rps={single:.0f} batch100_eps={batch:.0f}"
        f" batch100_over_ceiling={over:.2f} p95_at_half_ms={p95_ms:.0f}"
    )


def targets(plain: BrokerPhase) -> dict[str, object]:
    single = plain.loads[1].run.rps if 1 in plain.loads else 0.0
    over = plain.over_ceiling(100) or 0.0
    p95_ms = plain.half.run.p95_us / 1000 if plain.half is not None else float("inf")
    return {
        "single_rps": {"target": TARGETS["single_rps"], "value": single, "met": single >= 3000},
        "batch100_over_ceiling": {"target": 0.5, "value": over, "met": over >= 0.5},
        "p95_at_half_ms": {"target": 50.0, "value": p95_ms, "met": p95_ms < 50},
    }


async def run_all(plan: IngestPlan, work: Path, rows: list[Row]) -> tuple[BrokerPhase, BrokerPhase]:
    plain = await run_phase(plan, work / "plain", 0.0, rows)
    slowed = await run_phase(plan, work / "slowed", plan.delay_ms, rows)
    return plain, slowed


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--quick", is_flag=True, help="A short run (2 s per load, 20,000 ceiling events).")
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=RESULTS_DIR,
    show_default=True,
)
def main(quick: bool, results_dir: Path) -> None:
    """The ingest service's requests/s, events/s, ingest time and CPU; the last line sums up."""
    configure_logging("console", "WARNING")
    missing = ingest_wrk.wrk_missing()
    if missing is not None:
        raise click.ClickException(missing)
    plan = QUICK if quick else FULL
    work = Path(tempfile.mkdtemp(prefix="hifi-bench-ingest-"))
    started = datetime.now(UTC)
    rows: list[Row] = []
    try:
        plain, slowed = asyncio.run(run_all(plan, work, rows))
    except Exception:
        say(f"bench-ingest failed; logs kept in {work}")
        raise
    shutil.rmtree(work, ignore_errors=True)
    summary = summary_line(plain)
    report = {
        "started": started.isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "plan": asdict(plan),
        "load_generator": "wrk, 1 thread, client-side latency",
        "plain": plain.report(),
        "slowed": slowed.report(),
        "targets": targets(plain),
        "summary": summary,
    }
    path = write_results(results_dir, "bench-ingest", started, report)
    print(render_table(rows))
    print(f"results: {path}")
    print(summary)


if __name__ == "__main__":
    main()
