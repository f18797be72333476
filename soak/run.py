"""One soak run: measure the capacity, start the stack, offer a third of it under the fault
schedule, drain, and take the account by id against the destinations, the DLQs and the auditors."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from bench import phases
from bench.load import Tenants
from bench.lookups import TENANTS, ZIPF_S
from bench.report import say
from chaos import audit
from chaos.audit import MINUTE_MS, minute_of
from devstack import kafka_tools
from hifi.kafka import reading
from hifi.kafka.settings import KafkaSettings
from soak import calibrate, probe, schedule
from soak.faults import FaultRunner
from soak.ledger import Lags, Ledger
from soak.load import IngestLoad, KafkaLoad
from soak.model import Account, Fault, LagParts, Minute, SoakResult, StackCapacity
from soak.resources import ResourceSampler, slopes
from soak.stack import INGEST_TOKEN, KILLABLE, PARTITIONS, PLAIN, TENANTS_DEST, Stack, stack

#: the share of the total rate each source offers: straight to Kafka, tenants, through ingest
SHARES = {"k": 0.5, "t": 0.4, "i": 0.1}
#: each role's letter in the run, and in the two warm-up steps (numbered apart, and accounted
#: like the run's)
RUN = {"k": "k", "t": "t", "i": "i"}
WARMUPS = ({"k": "w", "t": "v", "i": "j"}, {"k": "x", "t": "u", "i": "h"})
SOURCES = {
    names[role]: dest
    for names in (RUN, *WARMUPS)
    for role, dest in (("k", PLAIN), ("t", TENANTS_DEST), ("i", PLAIN))
}
LAG_SLA_S = 1.0  # the catalog's default `lag_sla_s`
_READY_TIMEOUT_S = 180.0
_DRAIN_POLL_S = 5.0
_CAUSE_WINDOW_MS = 60_000  # a repeat this long after a fault ended is put down to it
_READ_S = 900.0  # the end's read of a source topic: an hour of records from the dev broker
# Tansu keeps every record in memory, without retention (9.5 MB/s under 31,900 events/s of
# about 250 bytes): the rate is capped so the run's records fit in this share of the memory.
TANSU_BYTES_PER_EVENT = 300
_BROKER_MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class SoakPlan:
    """What a run does; `rate_per_s` set: that total rate, without measuring the capacity."""

    duration_s: float
    seed: int
    load_share: float = 1 / 3
    rate_per_s: float | None = None
    faults: int | None = None
    capacity_events: int = 200_000
    drain_timeout_s: float = 900.0
    settle_s: float = 300.0  # the auditors' (the catalog's default)
    kafka: KafkaSettings | None = None  # a Kafka of the caller's; None: a Tansu of the run's own


async def soak(plan: SoakPlan, work: Path) -> SoakResult:
    """The whole run; `work` keeps every log."""
    capacity = await _capacity(plan, work)
    started_ms = time.time_ns() // 1_000_000
    ledger = Ledger(started_ms, SOURCES)
    tenants = Tenants(TENANTS, ZIPF_S, seed=plan.seed)
    work_dir = work / "stack"
    async with (
        stack(
            work_dir, ledger.on_delivery, seed=plan.seed, settle_s=plan.settle_s, kafka=plan.kafka
        ) as running,
        probe.running(running, work_dir / "probe.json") as broker,  # the broker alone
    ):
        await _start(running)
        stack_capacity = await _calibrate(plan, running, ledger, tenants, capacity)
        capacities = [capacity] + ([stack_capacity.events_per_s] if stack_capacity else [])
        held = broker_cap_per_s(plan.duration_s) if running.broker else float("inf")
        rate = plan.rate_per_s or min(min(capacities) * plan.load_share, held)
        planned = schedule.plan(
            plan.duration_s,
            plan.seed,
            killable=list(KILLABLE),
            faults=plan.faults,
            # a Kafka of the caller's is not this machine's to freeze
            without=() if running.broker else (schedule.BROKER_FROZEN,),
        )
        lower = min(capacities)  # the connector's drain, or the whole stack's if lower
        share = f" ({rate / lower:.2f} of the capacity)" if lower else ""
        say(f"soak: {plan.duration_s / 60:.0f} min at {rate:.0f} events/s{share}, seed {plan.seed}")
        for fault in planned:
            say(f"   fault {fault.line()}")
        origin = time.monotonic()
        run_started_ms = time.time_ns() // 1_000_000
        runner = FaultRunner(running, planned, origin)
        async with ResourceSampler(
            running.processes,
            kafka_ports=running.kafka_ports,
            started=origin,
            port_names=running.port_names,
        ) as sampler:
            async with asyncio.TaskGroup() as group:
                group.create_task(runner.run(), name="faults")
                ingest = _offer(group, running, ledger, tenants, rate, plan, names=RUN)
            say(f"   load offered; ingest senders: {ingest.line}")
            drained_s = await _drain(ledger, plan.drain_timeout_s)
            say(f"   drained {drained_s:.0f} s after the load ended")
            samples = tuple(sampler.samples)
        exits = {name: daemon.restarts for name, daemon in running.daemons.items()}
        for name, daemon in running.daemons.items():
            if not name.startswith("auditor"):
                await daemon.stop()
        account, parts = await _account(running, ledger, runner.done, run_started_ms, plan.settle_s)
    faults = tuple(sorted(runner.done, key=lambda fault: fault.start_s))
    return SoakResult(
        started_ms=run_started_ms,
        seed=plan.seed,
        duration_s=plan.duration_s,
        lag_sla_s=LAG_SLA_S,
        capacity_events_per_s=capacity,
        stack_capacity=stack_capacity,
        rate_events_per_s=rate,
        faults=faults,
        minutes=_minutes(ledger, faults, run_started_ms, parts, broker),
        samples=samples,
        slopes=tuple(slopes(samples, faults=faults)),
        account=account,
        exits=exits,
    )


def broker_cap_per_s(duration_s: float) -> float:
    """The highest rate whose records the in-memory broker holds for `duration_s` in half the
    memory available now."""
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    available_bytes = int(fields["MemAvailable"].split()[0]) * 1024
    cap = available_bytes * _BROKER_MEMORY_SHARE / (duration_s * TANSU_BYTES_PER_EVENT)
    return max(1.0, cap)


async def _capacity(plan: SoakPlan, work: Path) -> float:
    """The connector's drain of a pre-filled topic on a broker of its own, as `make bench`
    measures it (0 when the plan gives the rate)."""
    if plan.rate_per_s is not None:
        return 0.0
    say(f"soak: the connector's capacity ({plan.capacity_events:,} events)")
    drain = await phases.fresh_drain(
        work / "capacity",
        topic="soak.capacity" if plan.kafka is None else f"soak.capacity.{secrets.token_hex(3)}",
        kafka=plan.kafka,
        prefix="capacity",
        events=plan.capacity_events,
        partitions=PARTITIONS,
    )
    say(f"   {drain.events_per_s:.0f} events/s")
    return drain.events_per_s


def _offer(
    group: asyncio.TaskGroup,
    running: Stack,
    ledger: Ledger,
    tenants: Tenants,
    rate: float,
    plan: SoakPlan,
    *,
    names: Mapping[str, str],
    duration_s: float | None = None,
) -> IngestLoad:
    """The load of the three sources, as tasks of `group`, each numbered by its letter in
    `names` (`RUN` or one of `WARMUPS`); the ingest one returned."""
    duration_s = plan.duration_s if duration_s is None else duration_s
    for role in ("k", "t"):
        load = KafkaLoad(
            running.settings,
            running.topic(SOURCES[role]),
            names[role],
            rate * SHARES[role],
            ledger,
            partitions=PARTITIONS,
            tenants=tenants if role == "t" else None,
        )
        group.create_task(load.run(duration_s), name=f"load-{names[role]}")
    ingest = IngestLoad(running.ingest_url, INGEST_TOKEN, names["i"], rate * SHARES["i"], ledger)
    group.create_task(
        ingest.run(duration_s, deadline_s=duration_s + plan.drain_timeout_s),
        name=f"load-{names['i']}",
    )
    return ingest


async def _calibrate(
    plan: SoakPlan, running: Stack, ledger: Ledger, tenants: Tenants, capacity: float
) -> StackCapacity | None:
    """The stack's own capacity (`soak.calibrate`); None when the plan gives the rate."""
    if plan.rate_per_s is not None or capacity <= 0:
        return None
    pids = [pid for _, pid, _ in running.processes()] + [os.getpid()]
    if running.redis.pid is not None:
        pids.append(running.redis.pid)
    say(f"soak: the stack's capacity ({calibrate.IDLE_S:.0f} s idle, then two warm-up steps)")
    cores = calibrate.machine_cores()
    idle = await calibrate.cpu_cores_over(pids, calibrate.IDLE_S)
    first_rate = capacity * calibrate.FIRST_SHARE
    first = await _step(plan, running, ledger, tenants, pids, first_rate, WARMUPS[0])
    second_rate = calibrate.second_rate(cores=cores, idle_cores=idle, rate=first[0], used=first[1])
    second = await _step(plan, running, ledger, tenants, pids, second_rate, WARMUPS[1])
    measured = calibrate.capacity_of(cores=cores, idle_cores=idle, steps=(first, second))
    say(f"   {measured.line()}")
    return measured


async def _step(
    plan: SoakPlan,
    running: Stack,
    ledger: Ledger,
    tenants: Tenants,
    pids: list[int],
    rate: float,
    names: Mapping[str, str],
) -> tuple[float, float]:
    """One warm-up step offered at `rate`: the events/s delivered and the cores the stack used,
    once it settled. What it delivered, not what it was offered: a stack that falls behind
    looks cheaper per offered event than it is (docs/reliability.md, "The load")."""
    async with asyncio.TaskGroup() as group:
        _offer(
            group, running, ledger, tenants, rate, plan, names=names, duration_s=calibrate.STEP_S
        )
        await asyncio.sleep(calibrate.STEP_SETTLE_S)
        delivered, started = ledger.first_deliveries, time.monotonic()
        cores = await calibrate.cpu_cores_over(
            pids, calibrate.STEP_S - calibrate.STEP_SETTLE_S - 1.0
        )
        return (ledger.first_deliveries - delivered) / (time.monotonic() - started), cores


async def _start(running: Stack) -> None:
    for daemon in running.daemons.values():
        await daemon.start()
    for name, daemon in running.daemons.items():
        if not await daemon.ready(timeout_s=_READY_TIMEOUT_S):
            raise RuntimeError(f"{name} never became ready (/readyz); see {running.work}")


async def _drain(ledger: Ledger, timeout_s: float) -> float:
    """Wait until every accepted event was delivered, or nothing more arrived for a while (the
    rest is in a DLQ, or lost), or `timeout_s`; the seconds it took."""
    started = time.monotonic()
    last, still = -1, 0.0
    while time.monotonic() - started < timeout_s:
        missing = sum(len(seqs) for seqs in ledger.missing().values())
        if missing == 0:
            break
        still = still + _DRAIN_POLL_S if missing == last else 0.0
        if still >= 120.0:  # beyond the retrier's first tiers: what is left is not coming
            break
        last = missing
        await asyncio.sleep(_DRAIN_POLL_S)
    return time.monotonic() - started


async def _account(
    running: Stack, ledger: Ledger, faults: list[Fault], run_started_ms: int, settle_s: float
) -> tuple[Account, dict[int, dict[str, LagParts]]]:
    """The account by id, and each minute's lag in parts as the auditors table it."""
    dead = {
        dest: await kafka_tools.dead_letters(running.settings, running.name(dest))
        for dest in (PLAIN, TENANTS_DEST)
    }
    reasons: Counter[str] = Counter()
    lost: list[str] = []
    for letter, seqs in ledger.missing().items():
        for seq in seqs:
            reason = dead[SOURCES[letter]].get(f"{letter}-{seq}")
            if reason is None:
                lost.append(f"{letter}-{seq}")
            else:
                reasons[reason] += 1
    await _count_records(running, ledger)
    expected = ledger.expected_minutes({dest: set(found) for dest, found in dead.items()})
    mismatches: list[str] = []
    parts: dict[int, dict[str, LagParts]] = {}
    for dest in (PLAIN, TENANTS_DEST):
        found = await _audit(
            running.auditor_url(dest), running.name(dest), expected.get(dest, {}), settle_s
        )
        mismatches.extend(f"{dest} {mismatch}" for mismatch in found.mismatches)
        for minute, (before_ms, own_ms) in found.lag_parts.items():
            parts.setdefault(minute, {})[dest] = LagParts(before_ms, own_ms)
    account = Account(
        accepted=ledger.accepted_count(),
        delivered=ledger.delivered_count(),
        lost=len(lost),
        duplicates=ledger.duplicates(),
        written_again=ledger.written_again(),
        dead_lettered=dict(reasons),
        duplicate_causes=_causes(ledger, faults, run_started_ms),
        lost_sample=tuple(lost[:10]),
        audit_mismatches=tuple(mismatches),
    )
    return account, parts


class _EventId(msgspec.Struct):
    id: str


async def _count_records(running: Stack, ledger: Ledger) -> None:
    """Each accepted id's records in its source topic (`Ledger.written`): an event ingest
    answered 503 for after the broker wrote it is there twice once resent, and the auditors
    count both."""
    started = time.monotonic()
    decode = msgspec.json.Decoder(_EventId).decode
    records = 0
    for dest in (PLAIN, TENANTS_DEST):
        topic = running.topic(dest)
        batches = reading.topic_batches(running.settings, topic, timeout_s=_READ_S)
        async with contextlib.aclosing(batches):
            async for batch in batches:
                ids = []
                for record in batch:
                    try:
                        ids.append(decode(record.value).id)
                    except msgspec.MsgspecError:  # not one of the run's events
                        continue
                ledger.written(ids)
                records += len(batch)
    say(f"   source topics read: {records:,} records in {time.monotonic() - started:.0f} s")


async def _audit(
    url: str, dest: str, expected: dict[int, audit.Expected], settle_s: float
) -> audit.AuditAccount:
    """The auditor's tables against the run's count, once its last minute is final."""
    if not expected:
        return audit.AuditAccount.unread()
    final_ms = max(expected) + MINUTE_MS + int(settle_s * 1000)
    wait_s = max(0.0, (final_ms - time.time_ns() // 1_000_000) / 1000) + 90.0
    try:
        return await audit.account(url, dest, expected, timeout_s=wait_s)
    except httpx.HTTPError as exc:
        return audit.AuditAccount.unread(f"the auditor did not answer: {exc}")


def _causes(ledger: Ledger, faults: list[Fault], run_started_ms: int) -> dict[str, int]:
    """Each repeated delivery put down to the fault that ran at most a minute before it."""
    causes: Counter[str] = Counter()
    for second, count in ledger.repeats_by_s.items():
        at_ms = second * 1000
        cause = "no fault"
        for fault in sorted(faults, key=lambda f: f.start_s, reverse=True):
            start_ms = run_started_ms + fault.start_s * 1000
            end_ms = run_started_ms + fault.end_s * 1000 + _CAUSE_WINDOW_MS
            if start_ms <= at_ms <= end_ms:
                cause = f"{fault.kind} {fault.target}"
                break
        causes[cause] += count
    return dict(causes)


def _minutes(
    ledger: Ledger,
    faults: tuple[Fault, ...],
    run_started_ms: int,
    parts: Mapping[int, Mapping[str, LagParts]],
    broker: Mapping[int, Lags],
) -> tuple[Minute, ...]:
    minutes = []
    for start_ms, lags in ledger.lags().items():
        if start_ms < minute_of(run_started_ms):  # the warm-up's
            continue
        span = ((start_ms - run_started_ms) / 1000, (start_ms + MINUTE_MS - run_started_ms) / 1000)
        minutes.append(
            Minute(
                start_ms=start_ms,
                events=lags.events,
                p50_ms=lags.p50_ms,
                p95_ms=lags.p95_ms,
                p99_ms=lags.p99_ms,
                on_time=lags.p95_ms is not None and lags.p95_ms <= LAG_SLA_S * 1000,
                faults=tuple(f"{f.kind} {f.target}" for f in faults if f.active(*span)),
                parts=dict(parts.get(start_ms, {})),
                broker_p95_ms=broker[start_ms].p95_ms if start_ms in broker else None,
            )
        )
    return tuple(minutes)
