"""The lookup phase of `make bench`: 1,000 tenants with Zipf traffic (s = 1.1), tenant lookups on, Redis up and stopped.

On a private redis-server (its own port: the machine's Redis is never touched or stopped) that
holds an entry for each of 1,000 tenants (its own path and API key, `bench.catalog.LOOKUPS`):

1. a fresh broker, a topic pre-filled with events whose tenants follow a Zipf distribution of
   exponent 1.1 (a few hot tenants, a long tail); plain aiokafka reads it (this pair's ceiling),
   then the connector with lookups on drains it. `lookup_ratio` is its events/s over the ceiling
   of the run: in `make bench` the ceiling the run reports (the median pair's); alone, this
   pair's;
2. the end-to-end lag at half that rate, a fresh broker each: with Redis up, then with Redis
   stopped for the whole probe: its connector starts from the snapshot the first one wrote, and
   its refreshes (every second) fail all along.

`python -m bench.lookups [--quick]` runs the phase alone; its last line is
`bench-lookups: lookup_ratio=R p95_redis_up_ms=U p95_redis_down_ms=D`.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import click
import orjson
import redis

from bench import ceiling, load, machine, phases
from bench.catalog import DEST
from bench.report import Row, render_table, say, write_results
from devstack.broker import LocalBroker
from devstack.redis import RedisServer
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from hifi.logging import configure_logging
from tenants.keys import tenants_key

TENANTS = 1000
ZIPF_S = 1.1
HALF = 0.5
SMALL_BATCH_RECORDS = 20  # the CPU-per-request fit's second drain
RESULTS_DIR = Path(__file__).parent / "results"


@dataclass(frozen=True)
class LookupPlan:
    """How big the phase is."""

    events: int
    partitions: int
    probe_s: float


FULL = LookupPlan(events=400_000, partitions=4, probe_s=20.0)
QUICK = LookupPlan(events=20_000, partitions=2, probe_s=5.0)


@dataclass(frozen=True)
class LookupPhase:
    """What the phase measured."""

    ceiling_events_per_s: float  # this phase's own pair, on the Zipf topic
    ceiling_cores: tuple[float, float]
    drain: phases.Throughput
    drain_cores: tuple[float, float]
    half_rate: float
    up: phases.LiveResult
    down: phases.LiveResult
    down_from_snapshot: bool  # the stopped-Redis probe's connector became ready from the snapshot
    small_drain: phases.Throughput | None = None  # `SMALL_BATCH_RECORDS` events per request

    @property
    def events_per_request(self) -> float:
        return self.drain.delivered / self.drain.requests if self.drain.requests else 0.0

    def cpu_per_request_us(self) -> float | None:
        """The connector's CPU per request: `b` of CPU = a * events + b * requests solved over
        the two tenant drains (the default batches, and `SMALL_BATCH_RECORDS` events per
        request), each drain's CPU from its first delivery to its last (docs/performance.md)."""
        big, small = self.drain, self.small_drain
        if small is None or not (big.cpu_s and small.cpu_s and big.requests and small.requests):
            return None
        determinant = small.requests * big.delivered - big.requests * small.delivered
        if determinant == 0:
            return None
        return (small.cpu_s * big.delivered - big.cpu_s * small.delivered) / determinant * 1e6

    def cpu_per_request_us_over_plain(self, plain: phases.Throughput) -> float | None:
        """The definition before the fit: the drain's CPU less what its events cost on the plain
        drain (`plain`'s CPU per event, its few requests counted in), over its requests; it
        also charges a request the drain's time-bound CPU, so it rises as requests get fewer."""
        drain = self.drain
        if not (drain.requests and drain.cpu_s and plain.cpu_s and plain.delivered):
            return None
        per_event_s = plain.cpu_s / plain.delivered
        return (drain.cpu_s - drain.delivered * per_event_s) / drain.requests * 1e6

    def ratio(self, ceiling_events_per_s: float) -> float:
        return self.drain.events_per_s / ceiling_events_per_s if ceiling_events_per_s else 0.0

    def fields(self, ceiling_events_per_s: float) -> str:
        """What the summary line of `make bench` gains."""
        return (
            f"lookup_ratio={self.ratio(ceiling_events_per_s):.2f}"
            f" p95_redis_up_ms={self.up.lag.p95_ms:.0f} p95_redis_down_ms={self.down.lag.p95_ms:.0f}"
        )

    def report(
        self, ceiling_events_per_s: float, plain: phases.Throughput | None = None
    ) -> dict[str, object]:
        """The phase for the JSON results; `plain`: the connector on a plain destination in the
        same run, for `over_plain` (what cutting per tenant costs) and the CPU per request."""
        plain_events_per_s = plain.events_per_s if plain is not None else None
        over_plain = self.drain.events_per_s / plain_events_per_s if plain_events_per_s else None
        return {
            "tenants": TENANTS,
            "zipf_s": ZIPF_S,
            "lookup_ratio": self.ratio(ceiling_events_per_s),
            "ceiling_events_per_s": ceiling_events_per_s,
            "pair_ceiling_events_per_s": self.ceiling_events_per_s,
            "plain_events_per_s": plain_events_per_s,
            "over_plain": over_plain,
            "events_per_s": self.drain.events_per_s,
            "events_per_request": self.events_per_request,
            "cpu_per_request_us": self.cpu_per_request_us(),
            "cpu_per_request_us_over_plain": (
                None if plain is None else self.cpu_per_request_us_over_plain(plain)
            ),
            "small_events_per_request": (
                self.small_drain.delivered / self.small_drain.requests
                if self.small_drain is not None and self.small_drain.requests
                else None
            ),
            "cpu_per_event_us": self.drain.cpu_per_event_us,
            "plain_cpu_per_event_us": None if plain is None else plain.cpu_per_event_us,
            "p95_redis_up_ms": self.up.lag.p95_ms,
            "p95_redis_down_ms": self.down.lag.p95_ms,
            "down_from_snapshot": self.down_from_snapshot,
            "runs": asdict(self),
        }


def entries() -> dict[str, bytes]:
    """An entry for every tenant: its own API key for the `X-Api-Key` header."""
    return {
        f"t{rank}": orjson.dumps({"values": {"api_key": f"bench-key-{rank:04d}-0123456789"}})
        for rank in range(TENANTS)
    }


async def run_phase(plan: LookupPlan, work: Path, rows: list[Row]) -> LookupPhase:
    """The whole phase on a redis-server of its own; its rows are appended to `rows`."""
    work.mkdir(parents=True, exist_ok=True)
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        try:
            client.hset(tenants_key(DEST), mapping=entries())  # type: ignore[arg-type]
        finally:
            client.close()
        env = {"HIFI_REDIS_URL": server.url, "HIFI_STATE_DIR": str(work / "state")}
        pair = await _pair(plan, work, env, rows)
        ceiling_rate, ceiling_cores, drain, drain_cores = pair
        small = await _small_drain(plan, work, env)
        half_rate = drain.events_per_s * HALF
        live = work / "lookups-live"
        say(f"5b. lookups: lag at {HALF:.0%} ({half_rate:.0f}/s), Redis up, then stopped")
        async with phases.LiveSession(
            live,
            topics=["bench.lookups_up", "bench.lookups_down"],
            partitions=plan.partitions,
            lookups=env,
            tenants=load.Tenants(TENANTS, ZIPF_S, seed=1),
        ) as session:
            label = f"lookups, Redis up @{half_rate:.0f}/s"
            up, row = await phases.measured_probe(session, label, 0, half_rate, plan.probe_s)
            rows.append(row)
            server.stop()  # before the connector starts: it has only the snapshot
            try:
                label = f"lookups, Redis stopped @{half_rate:.0f}/s"
                down, row = await phases.measured_probe(session, label, 1, half_rate, plan.probe_s)
                rows.append(row)
            finally:
                server.start()
    log = (live / "connector.log").read_text(errors="replace")
    return LookupPhase(
        ceiling_rate,
        ceiling_cores,
        drain,
        drain_cores,
        half_rate,
        up,
        down,
        "lookup_loaded_from_snapshot" in log,
        small,
    )


async def _small_drain(plan: LookupPlan, work: Path, env: dict[str, str]) -> phases.Throughput:
    """On a fresh broker: as many events, drained `SMALL_BATCH_RECORDS` per request (more
    requests for the same events: the second point of the CPU-per-request fit, where what the
    two drains spend alike cancels out)."""
    events = plan.events
    small = await phases.fresh_drain(
        work / "throughput-lookups-small",
        topic="bench.lookups_small",
        prefix="lookups-small",
        events=events,
        partitions=plan.partitions,
        tenants=load.Tenants(TENANTS, ZIPF_S),
        lookups=env,
        max_batch_records=SMALL_BATCH_RECORDS,
    )
    if small.delivered < events:
        raise RuntimeError(f"lookups: {small.delivered} of {events} delivered in small batches")
    per_request = small.delivered / small.requests if small.requests else 0.0
    say(
        f"   connector with lookups, {SMALL_BATCH_RECORDS} events per request at most:"
        f" {small.events_per_s:.0f}/s ({per_request:.1f} events per request)"
    )
    return small


async def _pair(
    plan: LookupPlan, work: Path, env: dict[str, str], rows: list[Row]
) -> tuple[float, tuple[float, float], phases.Throughput, tuple[float, float]]:
    """On a fresh broker: the Zipf topic, its ceiling, and the connector with lookups draining it."""
    with LocalBroker(log_path=work / "broker-lookups.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        topic, prefix = "bench.lookups", "lookups"
        await kafka_admin.ensure_topics(settings, [topic], partitions=plan.partitions)
        say(f"5. lookups: pre-filling {topic}, {plan.events} events of {TENANTS} tenants, Zipf")
        await load.prefill(
            settings,
            topic,
            partitions=plan.partitions,
            events=plan.events,
            prefix=prefix,
            tenants=load.Tenants(TENANTS, ZIPF_S),
        )
        watch = machine.CpuWatch()
        ceiling_rate = await ceiling.consume_and_commit(
            settings, topic, events=plan.events, group_id="bench.ceiling.lookups", timeout_s=300
        )
        ceiling_cores = watch.cores()
        watch = machine.CpuWatch()
        drain = await phases.throughput(
            work / "throughput-lookups",
            bootstrap=broker.bootstrap,
            topic=topic,
            events=plan.events,
            prefix=prefix,
            timeout_s=900,
            lookups=env,
        )
        drain_cores = watch.cores()
    if drain.delivered < plan.events:
        raise RuntimeError(f"lookups: {drain.delivered} of {plan.events} delivered")
    per_request = drain.delivered / drain.requests if drain.requests else 0.0
    say(
        f"   ceiling {ceiling_rate:.0f}/s, connector with lookups {drain.events_per_s:.0f}/s"
        f" ({per_request:.1f} events per request)"
    )
    rows += [
        Row(
            "ceiling on the lookups topic",
            None,
            plan.events,
            plan.events,
            ceiling_rate,
            *ceiling_cores,
        ),
        Row(
            f"connector, lookups on ({TENANTS} tenants, Zipf {ZIPF_S})",
            None,
            plan.events,
            drain.delivered,
            drain.events_per_s,
            *drain_cores,
        ),
    ]
    return ceiling_rate, ceiling_cores, drain, drain_cores


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--quick", is_flag=True, help="A short run (20,000 events, 5 s probes).")
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=RESULTS_DIR,
    show_default=True,
)
def main(quick: bool, results_dir: Path) -> None:
    """The lookup phase alone; the last line is its summary."""
    configure_logging("console", "WARNING")
    plan = QUICK if quick else FULL
    work = Path(tempfile.mkdtemp(prefix="hifi-bench-lookups-"))
    started = datetime.now(UTC)
    rows: list[Row] = []
    try:
        phase = asyncio.run(run_phase(plan, work, rows))
    except Exception:
        say(f"bench-lookups failed; logs kept in {work}")
        raise
    shutil.rmtree(work, ignore_errors=True)
    summary = f"bench-lookups: {phase.fields(phase.ceiling_events_per_s)}"
    report = {
        "started": started.isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "plan": asdict(plan),
        **phase.report(phase.ceiling_events_per_s),
        "summary": summary,
    }
    path = write_results(results_dir, "bench-lookups", started, report)
    print(render_table(rows))
    print(f"results: {path}")
    print(summary)


if __name__ == "__main__":
    main()
