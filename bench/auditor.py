"""`make bench-auditor`: the auditor's peak RSS with events waiting, its throughput and RSS at 50k events/s.

Two phases, each on a fresh embedded Tansu broker, with the auditor as its own process
(`python -m auditor`, settle_s 300, metrics on), watched through `/metrics` and /proc:

1. waiting: 1,000,000 events (200 B JSON, event times spread over the minute before now) on a
   source topic and no connector, so no facts: every event waits for an outcome. The auditor
   reads them all; its peak RSS (VmHWM) is `rss_waiting_mb`, and its `tracked_events` gauge
   must say every event is held.
2. sustained: 21,000,000 events on a 50,000 events/s timeline (7 minutes of event time; the
   Kafka timestamps follow it) and a `delivered` fact per 500 events of a partition, built as
   the connector builds them. Draining it, the auditor's progress clock walks the timeline,
   minutes settle 300 s behind it as they would live, and its window holds what a live
   auditor at 50,000 events/s holds (15 to 18 million events, more while facts run ahead).
   `sustained_eps` is the events read per second from ready to the last record;
   `rss_sustained_mb` its peak RSS.

3. backlog: the backlog of `make bench` (pre-filled 1 KB events, 4 partitions), drained by
   a connector with its audit trail on, then read by the auditor: the source topic and the
   connector's facts. Both rates run from the first record (receipt) to the last, without
   the first one's batch, and pair up on one broker; the pair with the median ratio counts
   (`keeps_up`: the auditor reads at least as fast as the connector delivers).

4. group: the backlog of phase 3 delivered once more, then read by one auditor alone and by
   two auditors of one group (`bench/auditor_group.py`): `per_cpu_two_over_one` (the pair's
   events per CPU-second over the single one's: the work splits, it does not grow) and
   `two_over_one_drain` (the pair's events per second over the single one's), on the line
   `bench-auditor: per_cpu_two_over_one=R two_over_one_drain=D`.

The timeline starts 240 s before the auditor does (the bench waits for that moment when
producing was quicker) and runs on into the future. It cannot start earlier: at its first
commit, before it owns a partition, a fresh auditor's progress clock says "now" and closes
every minute older than settle_s, so events of those minutes would be counted as `time_past`
in a later one (the bench checks that none was). Reading faster than 50,000 events/s, the
auditor gains on the wall clock; `ahead_of_clock_s_max` says whether it ever passed it (its
clock then stops at now, and it holds more than it would live, not less).
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
from statistics import median_low

import click

from bench import auditor_load, load, machine, phases
from bench.auditor_group import group_phase
from bench.auditor_process import AuditorProcess, write_catalog
from bench.auditor_watch import Drain, Watch
from bench.report import write_results
from devstack.broker import LocalBroker
from hifi.audit import AUDIT_RETENTION_MS, DEFAULT_AUDIT_TOPIC
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from hifi.logging import configure_logging

RESULTS_DIR = Path(__file__).parent / "results"
DEST = "bench"
SETTLE_S = 300.0
TARGETS = {"rss_waiting_mb_max": 400.0, "rss_sustained_mb_max": 400.0}
QUICK_WAITING, QUICK_SUSTAINED, QUICK_BACKLOG = 20_000, 100_000, 20_000  # --quick
_BACKLOG_SCRAPE_S = 0.1  # a 400,000-event backlog takes ~4 s: scrape finely
_AUDIT_PARTITIONS = 4  # as the auditor creates hifi.audit
_ROLL_S = 10.0
_IDLE_S = 600.0  # the bench stops the auditor itself; this is only a safety net
_PRODUCE_EVENTS_PER_S = 125_000  # events and their facts, produced (a conservative guess)
_START_BEFORE_SETTLE_S = 60.0  # the timeline starts this long after now - settle_s


@dataclass(frozen=True)
class Plan:
    """How big each phase is."""

    waiting_events: int
    sustained_events: int
    rate: float  # events per second of event time, sustained phase
    partitions: int
    timeout_s: float
    backlog_events: int = 400_000
    backlog_repeats: int = 3


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def _waiting(plan: Plan, work: Path) -> Drain:
    """Events and no facts: every one waits for an outcome."""
    with LocalBroker(log_path=work / "broker-waiting.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        topic = "bench.waiting"
        await kafka_admin.ensure_topics(settings, [topic], partitions=plan.partitions)
        _say(f"1. waiting: producing {plan.waiting_events:,} events, no facts")
        timeline = auditor_load.ending_now(plan.waiting_events, 60.0)
        produce_s = await auditor_load.produce_events(
            settings,
            topic,
            partitions=plan.partitions,
            events=plan.waiting_events,
            prefix="waiting",
            timeline=timeline,
        )
        return await _audit(
            work / "waiting",
            broker.bootstrap,
            topic,
            plan,
            events=plan.waiting_events,
            facts=0,
            produce_s=produce_s,
            timeline=None,
        )


async def _sustained(plan: Plan, work: Path) -> Drain:
    """Events on a timeline at `plan.rate` and their facts, read as a backlog."""
    events = plan.sustained_events
    with LocalBroker(log_path=work / "broker-sustained.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        topic, audit_topic = "bench.sustained", "bench.audit"
        await kafka_admin.ensure_topics(settings, [topic], partitions=plan.partitions)
        await kafka_admin.ensure_topics(
            settings, [audit_topic], partitions=_AUDIT_PARTITIONS, retention_ms=AUDIT_RETENTION_MS
        )
        budget_s = events / _PRODUCE_EVENTS_PER_S + 3.0
        start_at = time.time() + budget_s  # when the auditor is to start
        first_ms = int((start_at - SETTLE_S + _START_BEFORE_SETTLE_S) * 1000)
        timeline = auditor_load.Timeline(start_ms=first_ms, rate=plan.rate, stamp=True)
        _say(
            f"2. sustained: producing {events:,} events on a {plan.rate:,.0f}/s timeline"
            f" ({events / plan.rate:.0f} s of event time) and their facts"
        )
        produce_s = await auditor_load.produce_events(
            settings,
            topic,
            partitions=plan.partitions,
            events=events,
            prefix="sustained",
            timeline=timeline,
        )
        facts, facts_s = await auditor_load.produce_facts(
            settings,
            audit_topic,
            dest=DEST,
            topic=topic,
            partitions=plan.partitions,
            events=events,
            prefix="sustained",
            timeline=timeline,
        )
        late_s = time.time() - start_at
        if late_s > _START_BEFORE_SETTLE_S - 5:
            raise RuntimeError(
                f"producing took {produce_s + facts_s:.0f} s, {late_s:.0f} s more than planned:"
                " the first events would be older than settle_s when the auditor starts;"
                " run on a quieter machine or with fewer --sustained-events"
            )
        if late_s < 0:
            await asyncio.sleep(-late_s)
        return await _audit(
            work / "sustained",
            broker.bootstrap,
            topic,
            plan,
            events=events,
            facts=facts,
            produce_s=produce_s + facts_s,
            timeline=timeline,
            audit_topic=audit_topic,
        )


async def _audit(
    work: Path,
    bootstrap: str,
    topic: str,
    plan: Plan,
    *,
    events: int,
    facts: int,
    produce_s: float,
    timeline: auditor_load.Timeline | None,
    audit_topic: str = "bench.audit",
    scrape_s: float | None = None,
) -> Drain:
    """Run the auditor on `topic` until it has read `events` (and `facts`) and archived them."""
    write_catalog(work / "catalog", dest=DEST, topic=topic, settle_s=SETTLE_S)
    auditor = AuditorProcess(
        catalog_dir=work / "catalog",
        dest=DEST,
        bootstrap=bootstrap,
        archive_dir=work / "archive",
        audit_topic=audit_topic,
        log_path=work / "auditor.log",
        roll_s=_ROLL_S,
        until_idle_s=_IDLE_S,
    )
    work.mkdir(parents=True, exist_ok=True)
    watch_cpu = machine.CpuWatch()
    auditor.start()
    try:
        await auditor.wait_ready()
        watch = Watch(
            auditor,
            work / "archive",
            topic,
            audit_topic,
            partitions=plan.partitions,
            events=events,
            facts=facts,
            timeline=timeline,
            roll_s=_ROLL_S,
            timeout_s=plan.timeout_s,
            **({} if scrape_s is None else {"scrape_s": scrape_s}),
        )
        await watch.run()
    finally:
        auditor.stop()
    return watch.result(produce_s, auditor.peak_rss_kb, watch_cpu.cores())


@dataclass(frozen=True)
class Backlog:
    """The connector and then the auditor over one pre-filled topic (phase 3)."""

    connector_events_per_s: float
    auditor_events_per_s: float
    auditor: Drain

    @property
    def ratio(self) -> float:
        """The auditor's intake over the connector's deliveries: at least 1 keeps up."""
        if not self.connector_events_per_s:
            return 0.0
        return self.auditor_events_per_s / self.connector_events_per_s


async def _backlog_pair(plan: Plan, work: Path, index: int) -> Backlog:
    events, topic, prefix = plan.backlog_events, f"bench.backlog{index}", f"backlog{index}"
    with LocalBroker(log_path=work / f"broker-backlog{index}.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        await kafka_admin.ensure_topics(settings, [topic], partitions=plan.partitions)
        await load.prefill(
            settings, topic, partitions=plan.partitions, events=events, prefix=prefix
        )
        drained = await phases.throughput(
            work / f"backlog{index}-connector",
            bootstrap=broker.bootstrap,
            topic=topic,
            events=events,
            prefix=prefix,
            timeout_s=plan.timeout_s,
        )
        if drained.delivered < events:
            raise RuntimeError(f"backlog: the connector delivered {drained.delivered} of {events}")
        facts = len(await read_topic(settings, DEFAULT_AUDIT_TOPIC, timeout_s=60))
        read = await _audit(
            work / f"backlog{index}",
            broker.bootstrap,
            topic,
            plan,
            events=events,
            facts=facts,
            produce_s=0.0,
            timeline=None,
            audit_topic=DEFAULT_AUDIT_TOPIC,
            scrape_s=_BACKLOG_SCRAPE_S,
        )
    pair = Backlog(drained.events_per_s, read.intake_events_per_s, read)
    _say(
        f"   connector {pair.connector_events_per_s:,.0f}/s, auditor"
        f" {pair.auditor_events_per_s:,.0f}/s ({pair.ratio:.2f})"
    )
    return pair


async def _backlog(plan: Plan, work: Path) -> Backlog:
    _say(
        f"3. backlog: {plan.backlog_events:,} events of {load.EVENT_BYTES} B, the connector and"
        f" then the auditor ({plan.backlog_repeats} pairs, the median ratio counts)"
    )
    pairs = [await _backlog_pair(plan, work, i) for i in range(plan.backlog_repeats)]
    ratios = [pair.ratio for pair in pairs]
    return pairs[ratios.index(median_low(ratios))]


def _backlog_line(backlog: Backlog, plan: Plan) -> str:
    return (
        f"bench-auditor: backlog={plan.backlog_events} connector_eps="
        f"{backlog.connector_events_per_s:.0f} auditor_eps={backlog.auditor_events_per_s:.0f}"
        f" keeps_up={backlog.ratio:.2f}"
    )


def _summary(waiting: Drain, sustained: Drain) -> str:
    return (
        f"bench-auditor: waiting={waiting.tracked_at_end} rss_waiting_mb={waiting.peak_rss_mb:.0f}"
        f" sustained_eps={sustained.events_per_s:.0f} rss_sustained_mb={sustained.peak_rss_mb:.0f}"
    )


def _check(waiting: Drain, sustained: Drain) -> None:
    """The figures measure what they claim, or the run fails."""
    if waiting.tracked_at_end != waiting.events:
        raise RuntimeError(
            f"waiting: the auditor tracks {waiting.tracked_at_end:,} events of the"
            f" {waiting.events:,} produced; every one should wait for an outcome"
        )
    for name, drain in (("waiting", waiting), ("sustained", sustained)):
        if drain.time_past:
            raise RuntimeError(
                f"{name}: {drain.time_past:,} events were counted in a later minute (time_past):"
                " the timeline started too long before the auditor"
            )


def _table(waiting: Drain, sustained: Drain, backlog: Drain) -> str:
    drains = (waiting, sustained, backlog)
    rows: list[tuple[str, ...]] = [("", "waiting", "sustained", "backlog")]
    for label, key in (
        ("events", "events"),
        ("facts", "facts"),
        ("produced in s", "produce_s"),
        ("read in s (ready to last record)", "drain_s"),
        ("events/s read", "events_per_s"),
        ("events/s, first record to last", "intake_events_per_s"),
        ("archived in s", "archived_s"),
        ("RSS when ready, MB", "rss_ready_mb"),
        ("peak RSS, MB", "peak_rss_mb"),
        ("tracked events, max", "max_tracked_events"),
        ("tracked events at the end", "tracked_at_end"),
        ("snapshot MB, max", "snapshot_mb_max"),
        ("cores: ours, others", "cores"),
    ):
        rows.append((label, *(_fmt(getattr(drain, key)) for drain in drains)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, tuple):
        return ", ".join(f"{v:.2f}" for v in value)
    return str(value)


async def _bench(plan: Plan, work: Path) -> dict[str, object]:
    waiting = await _waiting(plan, work)
    _say(f"   peak RSS {waiting.peak_rss_mb:.0f} MB, {waiting.tracked_at_end:,} events tracked")
    sustained = await _sustained(plan, work)
    _say(
        f"   {sustained.events_per_s:,.0f} events/s read, peak RSS {sustained.peak_rss_mb:.0f} MB,"
        f" window up to {sustained.max_tracked_events:,} events"
    )
    _check(waiting, sustained)
    backlog = await _backlog(plan, work)
    _say(f"4. group: {plan.backlog_events:,} events read by one auditor, then by two of one group")
    group = await group_phase(
        work / "group",
        events=plan.backlog_events,
        partitions=plan.partitions,
        settle_s=SETTLE_S,
        timeout_s=plan.timeout_s,
    )
    _say(f"   {group.line()}")
    return {
        "group": {
            "one": asdict(group.one),
            "two": asdict(group.two),
            "per_cpu_two_over_one": group.per_cpu_two_over_one,
            "two_over_one_drain": group.two_over_one_drain,
        },
        "group_line": group.line(),
        "waiting": asdict(waiting),
        "sustained": asdict(sustained),
        "backlog": {
            **asdict(backlog),
            "ratio": backlog.ratio,
        },
        "keeps_up": backlog.ratio >= 1.0,
        "table": _table(waiting, sustained, backlog.auditor),
        "backlog_line": _backlog_line(backlog, plan),
        "summary": _summary(waiting, sustained),
    }


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--waiting-events",
    default=1_000_000,
    show_default=True,
    help="Events with no outcome (phase 1).",
)
@click.option(
    "--sustained-events",
    default=21_000_000,
    show_default=True,
    help="Events of the timeline, with their facts (phase 2); 7 minutes at 50,000/s.",
)
@click.option(
    "--rate", default=50_000.0, show_default=True, help="Events per second of the timeline."
)
@click.option("--partitions", default=4, show_default=True, help="Partitions of the source topic.")
@click.option(
    "--backlog-events",
    default=400_000,
    show_default=True,
    help="Pre-filled 1 KB events of phase 3 (make bench's backlog).",
)
@click.option(
    "--backlog-repeats",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Connector/auditor pairs of phase 3; the median ratio counts.",
)
@click.option(
    "--quick",
    is_flag=True,
    help=f"Small counts for a smoke run: {QUICK_WAITING:,} waiting, {QUICK_SUSTAINED:,} sustained.",
)
@click.option("--timeout-s", default=900.0, show_default=True, help="Longest wait for one drain.")
@click.option("--keep-work", is_flag=True, help="Keep logs and archives (else only on failure).")
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path),
    default=RESULTS_DIR,
    show_default=True,
    help="Where the JSON file goes.",
)
def main(
    waiting_events: int,
    sustained_events: int,
    rate: float,
    partitions: int,
    backlog_events: int,
    backlog_repeats: int,
    quick: bool,
    timeout_s: float,
    keep_work: bool,
    results_dir: Path,
) -> None:
    """Measure the auditor's memory and throughput on this machine; the last line is the summary."""
    configure_logging("console", "WARNING")
    if quick:
        waiting_events, sustained_events = QUICK_WAITING, QUICK_SUSTAINED
        backlog_events, backlog_repeats = QUICK_BACKLOG, 1
    plan = Plan(
        waiting_events,
        sustained_events,
        rate,
        partitions,
        timeout_s,
        backlog_events,
        backlog_repeats,
    )
    work = Path(tempfile.mkdtemp(prefix="hifi-bench-auditor-"))
    started = datetime.now(UTC)
    try:
        results = asyncio.run(_bench(plan, work))
    except Exception:
        _say(f"bench-auditor failed; logs kept in {work}")
        raise
    if not keep_work:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": "make bench-auditor (python -m bench.auditor)",
        "machine": machine.describe(),
        "plan": asdict(plan),
        "quick": quick,
        "settle_s": SETTLE_S,
        "targets": TARGETS,
        **results,
    }
    path = write_results(results_dir, "bench-auditor", started, report)
    print(results["table"])
    print(f"results: {path}")
    print(results["backlog_line"])
    print(results["group_line"])
    print(results["summary"])


if __name__ == "__main__":
    main()
