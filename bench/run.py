"""`make bench`: broker, destination and connector on this machine; a table and a JSON file of results.

Phases, all in one run against the embedded Tansu broker:
1. ceiling: plain aiokafka consume + commit of the pre-filled topic, no HTTP;
2. throughput: the connector (its own process, catalog defaults, metrics on) on the same topic;
3. lag: paced live load at 25, 50 and 75 % of (2), end-to-end lag from event time to receipt;
4. scale rating: the highest offered rate whose p95 lag stays under 1 s, with 1 % of requests
   answered 503 (a bisection), confirmed without faults;
5. the connector's peak RSS over every run.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import click
import orjson

from bench import ceiling, load, machine, phases
from bench.measure import Probe, next_probe_rate, scale_rating
from config.settings import KafkaSettings
from devstack.broker import LocalBroker
from plumbing import kafka
from plumbing.logging import configure_logging

RESULTS_DIR = Path(__file__).parent / "results"
LAG_LIMIT_MS = 1000.0
LAG_FRACTIONS = (0.25, 0.50, 0.75)
TARGETS = {"ratio_min": 0.5, "p95_at_half_ms_max": 100.0, "rss_mb_max": 400.0}
_SEARCH_HIGH = 1.25  # the search tries up to this multiple of the measured maximum
_SEARCH_RESOLUTION = 0.1


@dataclass(frozen=True)
class Plan:
    """How big each phase is."""

    events: int
    partitions: int
    lag_probe_s: float
    scale_probe_s: float
    max_scale_probes: int

    @property
    def drain_s(self) -> float:
        return max(15.0, self.scale_probe_s)


@dataclass(frozen=True)
class Row:
    """One line of the results table."""

    phase: str
    offered_per_s: float | None
    events: int
    delivered: int
    events_per_s: float | None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    held: bool | None = None


def _live_row(result: phases.LiveResult) -> Row:
    probe = result.probe
    return Row(
        phase=result.label,
        offered_per_s=result.offered.rate,
        events=result.offered.events,
        delivered=result.delivered,
        events_per_s=result.offered.rate,
        p50_ms=result.lag.p50_ms,
        p95_ms=result.lag.p95_ms,
        p99_ms=result.lag.p99_ms,
        held=probe.held(LAG_LIMIT_MS),
    )


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def _bench(plan: Plan, work: Path, broker: LocalBroker) -> dict[str, object]:
    settings = KafkaSettings(bootstrap=broker.bootstrap)
    rows: list[Row] = []
    topic = "bench.events"
    await kafka.ensure_topics(settings, [topic], partitions=plan.partitions)
    _say(f"pre-filling {topic}: {plan.events} events of {load.EVENT_BYTES} B")
    await load.prefill(
        settings, topic, partitions=plan.partitions, events=plan.events, prefix="fill"
    )

    _say("1. ceiling: aiokafka consume + commit")
    ceiling_rate = await ceiling.consume_and_commit(
        settings, topic, events=plan.events, group_id="bench.ceiling", timeout_s=300
    )
    rows.append(
        Row("ceiling: aiokafka consume+commit", None, plan.events, plan.events, ceiling_rate)
    )

    _say("2. connector throughput on the same topic")
    drained = await phases.throughput(
        work / "throughput",
        bootstrap=broker.bootstrap,
        topic=topic,
        events=plan.events,
        prefix="fill",
        timeout_s=600,
    )
    if drained.delivered < plan.events:
        raise RuntimeError(f"throughput: {drained.delivered} of {plan.events} delivered")
    max_rate = drained.events_per_s
    rows.append(Row("connector throughput", None, plan.events, drained.delivered, max_rate))
    peak_rss_kb = [drained.peak_rss_kb]

    _say(f"4. scale rating with 1 % 503 (max measured {max_rate:.0f}/s)")
    fault_probes: list[Probe] = []
    async with phases.LiveSession(
        work / "scale",
        settings,
        topics=[f"bench.scale{i}" for i in range(plan.max_scale_probes)],
        partitions=plan.partitions,
        fault_ratio=0.01,
        fault="503",
    ) as session:
        for index in range(plan.max_scale_probes):
            rate = next_probe_rate(
                fault_probes,
                LAG_LIMIT_MS,
                first=max_rate,
                high=max_rate * _SEARCH_HIGH,
                resolution=_SEARCH_RESOLUTION,
            )
            if rate is None:
                break
            result = await session.probe(
                f"scale, 1% 503 @{rate:.0f}/s",
                index=index,
                rate=rate,
                duration_s=plan.scale_probe_s,
                drain_s=plan.drain_s,
            )
            _say(f"   {result.label}: p95 {result.lag.p95_ms:.0f} ms, {result.delivered} delivered")
            fault_probes.append(result.probe)
            rows.append(_live_row(result))
        peak_rss_kb.append(session.peak_rss_kb)
    fault_rating = scale_rating(fault_probes, LAG_LIMIT_MS)

    _say("3. lag at 25/50/75 % of the maximum, no faults (and the rating, confirmed)")
    clean_probes: list[Probe] = []
    half: phases.LiveResult | None = None
    async with phases.LiveSession(
        work / "live",
        settings,
        topics=[f"bench.live{i}" for i in range(len(LAG_FRACTIONS) + 1)],
        partitions=plan.partitions,
    ) as session:
        offers = [(f"lag @{int(f * 100)}%", f * max_rate) for f in LAG_FRACTIONS]
        if fault_rating > 0:
            offers.append((f"rating check, no faults @{fault_rating:.0f}/s", fault_rating))
        for index, (label, rate) in enumerate(offers):
            result = await session.probe(
                label,
                index=index,
                rate=rate,
                duration_s=plan.lag_probe_s,
                drain_s=plan.drain_s,
            )
            _say(f"   {label}: p95 {result.lag.p95_ms:.0f} ms, {result.delivered} delivered")
            clean_probes.append(result.probe)
            rows.append(_live_row(result))
            if index == 1:
                half = result
        peak_rss_kb.append(session.peak_rss_kb)
    rating = min(fault_rating, scale_rating(clean_probes, LAG_LIMIT_MS))

    assert half is not None
    ratio = max_rate / ceiling_rate if ceiling_rate > 0 else 0.0
    rss_mb = max(peak_rss_kb) / 1024
    summary = (
        f"bench: ratio={ratio:.2f} p95_at_half_ms={half.lag.p95_ms:.0f} "
        f"scale_rating_msgs={rating:.0f} rss_mb={rss_mb:.0f}"
    )
    return {
        "rows": [asdict(row) for row in rows],
        "ceiling_events_per_s": ceiling_rate,
        "connector_events_per_s": max_rate,
        "ratio": ratio,
        "p95_at_half_ms": half.lag.p95_ms,
        "scale_rating_msgs": rating,
        "scale_rating_with_faults_msgs": fault_rating,
        "rss_mb": rss_mb,
        "summary": summary,
    }


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_table(rows: list[dict[str, object]]) -> str:
    """The results as a fixed-width text table."""
    header = (
        "phase",
        "offered/s",
        "events",
        "delivered",
        "events/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "p95<1s",
    )
    lines = [header]
    for row in rows:
        held = row["held"]
        lines.append(
            (
                str(row["phase"]),
                _fmt(_num(row["offered_per_s"])),
                _fmt(_num(row["events"])),
                _fmt(_num(row["delivered"])),
                _fmt(_num(row["events_per_s"])),
                _fmt(_num(row["p50_ms"])),
                _fmt(_num(row["p95_ms"])),
                _fmt(_num(row["p99_ms"])),
                "-" if held is None else ("yes" if held else "no"),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--events", default=400_000, show_default=True, help="Pre-filled 1 KB events.")
@click.option("--partitions", default=8, show_default=True, help="Partitions of each topic.")
@click.option("--lag-probe-s", default=20.0, show_default=True, help="Seconds per lag probe.")
@click.option("--scale-probe-s", default=15.0, show_default=True, help="Seconds per scale probe.")
@click.option("--max-scale-probes", default=5, show_default=True, help="Probes in the search.")
@click.option(
    "--keep-work", is_flag=True, help="Keep logs and deliveries files (else only on failure)."
)
def main(
    events: int,
    partitions: int,
    lag_probe_s: float,
    scale_probe_s: float,
    max_scale_probes: int,
    keep_work: bool,
) -> None:
    """Benchmark the connector on this machine; the last line is the summary."""
    configure_logging("console", "WARNING")  # the table owns stdout
    plan = Plan(events, partitions, lag_probe_s, scale_probe_s, max_scale_probes)
    work = Path(tempfile.mkdtemp(prefix="hifi-bench-"))
    started = datetime.now(UTC)
    try:
        with LocalBroker(log_path=work / "broker.log") as broker:
            results = asyncio.run(_bench(plan, work, broker))
    except Exception:
        _say(f"bench failed; logs kept in {work}")
        raise
    if not keep_work:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": "make bench (python -m bench.run)",
        "machine": machine.describe(),
        "plan": asdict(plan),
        "targets": TARGETS,
        **results,
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"bench-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    rows = results["rows"]
    assert isinstance(rows, list)
    print(render_table(rows))
    print(f"results: {path}")
    print(results["summary"])


if __name__ == "__main__":
    main()
