"""`make bench`: broker, destination and connector on this machine; a table and a JSON file of results.

Phases, all in one run, each attempt and each live probe on a fresh embedded Tansu broker:
1. ceiling: plain aiokafka consume + commit of a pre-filled topic, no HTTP;
2. throughput: the connector (its own process, catalog defaults, metrics and audit trail on) on
   the same topic; 1 and 2 are repeated on fresh topics and the pair with the median ratio counts;
   then the audit trail's cost: the connector's throughput with the trail on and with it off
   (`[accounting] audit = false`), once each, back to back (every other phase runs with it on);
   then TLS (`bench.tls_cost`): plaintext and through stunnel, three pairs (`tls_over_plain`;
   the raw consumer's through the same listener, `tls_ceiling_over_plain`; the connector's CPU
   an event in each, `tls_cpu_over_plain`);
3. lag: paced live load at 25, 50 and 75 % of (2), end-to-end lag from event time to receipt,
   then at 50 % five pairs of the floor (the connector's intake alone, `bench.floor`, no HTTP)
   and the connector, in alternating order (`p95_over_floor_ms`: the median pair's difference),
   and the connector with `concurrency = "fixed"` (adaptive is the default), measured alike;
4. scale rating: the highest offered rate whose p95 lag stays under 1 s, with 1 % of requests
   answered 503 (a bisection), confirmed without faults;
5. tenant lookups (`bench.lookups`): 1,000 tenants with Zipf traffic on a redis-server of the
   bench's own, the connector's throughput with lookups on over the ceiling of (1), and its lag
   at half that rate with Redis up and with Redis stopped for the whole probe;
6. the connector's peak RSS over every run but (5) (reported apart, in `lookups`);
7. capacity (`bench.capacity`): adaptive concurrency against fixed `max_in_flight` 1 to 64 at a
   destination that serves at most N = 8 or 64 requests at once and answers 503 beyond, and
   while N goes 8 -> 64 -> 8; `arc_vs_best_fixed` is adaptive over the best fixed, the lower N's;
8. one event per request (`bench.single`): `format = "single"` against `json_array` on the same
   events, two pairs (`single_eps`, `single_over_array`);
9. decoding (`bench.decode_cost`): the same events as Avro with `[decode]` and as JSON, two pairs
   (`avro_over_json`).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import median_low

import click

from bench import (
    audit_cost,
    capacity,
    ceiling,
    decode_cost,
    live,
    load,
    lookups,
    machine,
    phases,
    single,
    tls_cost,
)
from bench.measure import scale_rating
from bench.phases import LAG_LIMIT_MS
from bench.report import Row, render_table, say, write_results
from devstack.broker import LocalBroker
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from hifi.logging import configure_logging

RESULTS_DIR = Path(__file__).parent / "results"
LAG_FRACTIONS = (0.25, 0.50, 0.75)
# issue 44's (lookup_ratio is reported with none: a tenant path needs several times the
# requests of a plain one); cpu_per_request_us is judged against the code before, alternated
TARGETS = {
    "ratio_min": 0.7,
    "p95_at_half_ms_max": 100.0,
    "p95_over_floor_ms_max": 10.0,
    "rss_mb_max": 300.0,
    "p95_redis_up_ms_max": 1000.0,
    "p95_redis_down_ms_max": 1000.0,
    "arc_vs_best_fixed_min": 0.95,
    "tls_over_plain_min": 0.9,
    "cpu_per_request_us": "at most half of the code before, alternated (bench.cpu_ab)",
}


@dataclass(frozen=True)
class Plan:
    """How big each phase is."""

    events: int
    partitions: int
    repeats: int
    lag_probe_s: float
    scale_probe_s: float
    max_scale_probes: int


@dataclass(frozen=True)
class Attempt:
    """One ceiling + throughput pair on its own pre-filled topic."""

    ceiling_events_per_s: float
    ceiling_cores: tuple[float, float]
    connector: phases.Throughput
    connector_cores: tuple[float, float]


async def _attempt(plan: Plan, work: Path, index: int) -> Attempt:
    """On a fresh broker, pre-fill a topic, read it with plain aiokafka, then with the connector."""
    with LocalBroker(log_path=work / f"broker-attempt{index}.log") as broker:
        return await _attempt_on(plan, work, KafkaSettings(bootstrap=broker.bootstrap), index)


async def _prefill(plan: Plan, settings: KafkaSettings, topic: str, prefix: str) -> None:
    await kafka_admin.ensure_topics(settings, [topic], partitions=plan.partitions)
    say(f"pre-filling {topic}: {plan.events} events of {load.EVENT_BYTES} B")
    await load.prefill(
        settings, topic, partitions=plan.partitions, events=plan.events, prefix=prefix
    )


async def _attempt_on(plan: Plan, work: Path, settings: KafkaSettings, index: int) -> Attempt:
    topic, prefix = f"bench.events{index}", f"fill{index}"
    await _prefill(plan, settings, topic, prefix)
    say(f"1. ceiling: aiokafka consume + commit ({index + 1} of {plan.repeats})")
    watch = machine.CpuWatch()
    ceiling_rate = await ceiling.consume_and_commit(
        settings, topic, events=plan.events, group_id=f"bench.ceiling{index}", timeout_s=300
    )
    ceiling_cores = watch.cores()
    say(f"2. connector throughput on the same topic ({index + 1} of {plan.repeats})")
    watch = machine.CpuWatch()
    drained = await phases.throughput(
        work / f"throughput{index}",
        bootstrap=settings.bootstrap,
        topic=topic,
        events=plan.events,
        prefix=prefix,
        timeout_s=600,
    )
    if drained.delivered < plan.events:
        raise RuntimeError(f"throughput: {drained.delivered} of {plan.events} delivered")
    say(f"   ceiling {ceiling_rate:.0f}/s, connector {drained.events_per_s:.0f}/s")
    return Attempt(ceiling_rate, ceiling_cores, drained, watch.cores())


async def _bench(plan: Plan, work: Path) -> dict[str, object]:
    attempts = [await _attempt(plan, work, i) for i in range(plan.repeats)]
    # Each attempt pairs a ceiling and a connector run on one topic, back to back; the median
    # attempt (by that pair's ratio) is the one reported, so one noisy run cannot decide it.
    ratios = [a.connector.events_per_s / a.ceiling_events_per_s for a in attempts]
    median = attempts[ratios.index(median_low(ratios))]
    ceiling_rate, max_rate = median.ceiling_events_per_s, median.connector.events_per_s
    of = f" (median of {plan.repeats})" if plan.repeats > 1 else ""
    rows = [
        Row(
            f"ceiling: aiokafka consume+commit{of}",
            None,
            plan.events,
            plan.events,
            ceiling_rate,
            *median.ceiling_cores,
        ),
        Row(
            f"connector throughput{of}",
            None,
            plan.events,
            median.connector.delivered,
            max_rate,
            *median.connector_cores,
        ),
    ]

    async def prefill(settings: KafkaSettings, topic: str, prefix: str) -> None:
        await _prefill(plan, settings, topic, prefix)

    audit = await audit_cost.run_phase(work, plan.events, prefill)
    rows += audit.rows(plan.events)

    tls = await tls_cost.run_phase(work / "tls", plan.events, prefill)
    rows += tls.rows(plan.events)
    peak_rss_kb = [a.connector.peak_rss_kb for a in attempts]
    peak_rss_kb += [audit.on.peak_rss_kb, audit.off.peak_rss_kb]

    say(f"4. scale rating with 1 % 503 (max measured {max_rate:.0f}/s)")
    fault_probes, rss_kb = await live.scale_search(
        work,
        max_rate,
        rows,
        partitions=plan.partitions,
        probe_s=plan.scale_probe_s,
        max_probes=plan.max_scale_probes,
    )
    peak_rss_kb.append(rss_kb)
    fault_rating = scale_rating(fault_probes, LAG_LIMIT_MS)

    say("3. lag at 25/50/75 % of the maximum, no faults (the rating confirmed, and the floor)")
    offers = [(f"lag @{int(f * 100)}%", f * max_rate) for f in LAG_FRACTIONS]
    if fault_rating > 0:
        offers.append((f"rating check, no faults @{fault_rating:.0f}/s", fault_rating))
    lagged, references, rss_kb = await live.lag_probes(
        work, offers, max_rate * 0.50, rows, partitions=plan.partitions, probe_s=plan.lag_probe_s
    )
    peak_rss_kb.append(rss_kb)
    rating = min(fault_rating, scale_rating([r.probe for r in lagged], LAG_LIMIT_MS))

    say("5. tenant lookups: 1,000 tenants, Zipf traffic, Redis up and stopped")
    lookup_plan = lookups.LookupPlan(plan.events, plan.partitions, plan.lag_probe_s)
    tenants = await lookups.run_phase(lookup_plan, work / "lookups", rows)

    say("7. capacity: adaptive against fixed concurrency at a destination of N = 8 and 64")
    arc = await capacity.run_phase(capacity.FULL, rows)
    one_each = await single.run_phase(work / "single")
    rows += one_each.rows(single.EVENTS)
    decoding = await decode_cost.run_phase(work / "decode")
    rows += decoding.rows(decode_cost.EVENTS)

    half = lagged[LAG_FRACTIONS.index(0.50)]
    ratio = max_rate / ceiling_rate
    rss_mb = max(peak_rss_kb) / 1024
    summary = summary_line(
        ratio,
        half.lag.p95_ms,
        rating,
        rss_mb,
        lookups=tenants.fields(ceiling_rate),
        capacity=arc.fields(),
        tls_over_plain=tls.tls_over_plain,
        tls_ceiling_over_plain=tls.ceiling_tls_over_plain,
        tls_cpu_over_plain=tls.cpu_tls_over_plain,
        cpu_per_request_us=tenants.cpu_per_request_us(),
        p95_over_floor_ms=references.p95_over_floor_ms,
        single_eps=one_each.single_eps,
        avro_over_json=decoding.avro_over_json,
    )
    audit_line = (
        f"audit trail: on={audit.on.events_per_s:.0f}/s off={audit.off.events_per_s:.0f}/s "
        f"on_over_off={audit.on_over_off:.2f} (once each; every other figure with it on)"
    )
    return {
        "rows": [asdict(row) for row in rows],
        "attempts": [asdict(attempt) for attempt in attempts],
        "ceiling_events_per_s": ceiling_rate,
        "connector_events_per_s": max_rate,
        "ratio": ratio,
        "p95_at_half_ms": half.lag.p95_ms,
        "p95_floor_at_half_ms": references.floor.lag.p95_ms,
        "p95_over_floor_ms": references.p95_over_floor_ms,
        "floor_pairs": references.report(),
        "p95_fixed_concurrency_at_half_ms": references.fixed.lag.p95_ms,
        "scale_rating_msgs": rating,
        "scale_rating_with_faults_msgs": fault_rating,
        "rss_mb": rss_mb,
        "audit_trail": {
            "on_events_per_s": audit.on.events_per_s,
            "off_events_per_s": audit.off.events_per_s,
            "on_over_off": audit.on_over_off,
            "runs": asdict(audit),
        },
        "lookups": tenants.report(ceiling_rate, median.connector),
        "capacity": arc.report(),
        "tls": tls.report(),
        "single": one_each.report(),
        "decode": decoding.report(),
        "audit_line": audit_line,
        "summary": summary,
        "table": render_table(rows),
    }


def summary_line(
    ratio: float,
    p95_at_half_ms: float,
    rating: float,
    rss_mb: float,
    *,
    lookups: str,
    capacity: str = "",
    tls_over_plain: float | None = None,
    tls_ceiling_over_plain: float | None = None,
    tls_cpu_over_plain: float | None = None,
    cpu_per_request_us: float | None = None,
    p95_over_floor_ms: float | None = None,
    single_eps: float | None = None,
    avro_over_json: float | None = None,
) -> str:
    """The last line of `make bench`; `lookups` and `capacity`: those phases' fields;
    `tls_over_plain`: the TLS phase's ratio, `tls_ceiling_over_plain` the raw consumer's through
    the same listener, `tls_cpu_over_plain` the connector's CPU an event in plaintext over through
    TLS; `cpu_per_request_us`: the connector's CPU per
    request on the tenant drain; `p95_over_floor_ms`: p95 at half load less the floor's, the
    median of pairs taken back to back; `single_eps`: events/s one a request; `avro_over_json`:
    the drain of Avro with `[decode]` over JSON's (each left out when not measured)."""
    extra = {
        "tls_over_plain": None if tls_over_plain is None else f"{tls_over_plain:.2f}",
        "tls_ceiling_over_plain": (
            None if tls_ceiling_over_plain is None else f"{tls_ceiling_over_plain:.2f}"
        ),
        "tls_cpu_over_plain": None if tls_cpu_over_plain is None else f"{tls_cpu_over_plain:.2f}",
        "cpu_per_request_us": None if cpu_per_request_us is None else f"{cpu_per_request_us:.0f}",
        "p95_over_floor_ms": None if p95_over_floor_ms is None else f"{p95_over_floor_ms:.0f}",
        "single_eps": None if single_eps is None else f"{single_eps:.0f}",
        "avro_over_json": None if avro_over_json is None else f"{avro_over_json:.2f}",
    }
    return (
        f"bench: ratio={ratio:.2f} p95_at_half_ms={p95_at_half_ms:.0f} "
        f"scale_rating_msgs={rating:.0f} rss_mb={rss_mb:.0f} {lookups}"
        + (f" {capacity}" if capacity else "")
        + "".join(f" {name}={value}" for name, value in extra.items() if value is not None)
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--events", default=400_000, show_default=True, help="Pre-filled 1 KB events.")
@click.option(
    "--partitions",
    default=4,
    show_default=True,
    help="Partitions of each topic (Tansu's lag floor rises with more; docs/performance.md).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Ceiling/throughput pairs; the one with the median ratio counts.",
)
@click.option("--lag-probe-s", default=20.0, show_default=True, help="Seconds per lag probe.")
@click.option("--scale-probe-s", default=15.0, show_default=True, help="Seconds per scale probe.")
@click.option("--max-scale-probes", default=5, show_default=True, help="Probes in the search.")
@click.option(
    "--keep-work", is_flag=True, help="Keep logs and deliveries files (else only on failure)."
)
def main(
    events: int,
    partitions: int,
    repeats: int,
    lag_probe_s: float,
    scale_probe_s: float,
    max_scale_probes: int,
    keep_work: bool,
) -> None:
    """Benchmark the connector on this machine; the last line is the summary."""
    configure_logging("console", "WARNING")  # the table owns stdout
    plan = Plan(events, partitions, repeats, lag_probe_s, scale_probe_s, max_scale_probes)
    work = Path(tempfile.mkdtemp(prefix="hifi-bench-"))
    started = datetime.now(UTC)
    try:
        results = asyncio.run(_bench(plan, work))
    except Exception:
        say(f"bench failed; logs kept in {work}")
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
    path = write_results(RESULTS_DIR, "bench", started, report)
    print(results["table"])
    print(f"results: {path}")
    print(results["audit_line"])
    print(results["summary"])


if __name__ == "__main__":
    main()
