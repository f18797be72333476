"""Phase 4 of `make bench-auditor`: two auditors of one group against one, over one backlog and its facts.

A connector drains the backlog of phase 3 with its audit trail on (facts keyed by origin
partition, as in production), then one auditor reads the source topic and the facts alone
(group `bench.one`), then two auditors of one group share them (`bench.two.N`, one archive),
counted from the moment each owns a share. For each auditor: the source events it read per
CPU-second of its process; for each run: the events the members read per second, together.
`per_cpu_two_over_one` is the two members' mean events per CPU-second over the single
auditor's (the work splits, it does not grow: within 10 %); `two_over_one_drain` is the pair's
events per second over the single auditor's (above 1: the pair drains the backlog faster).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from bench import load, phases
from bench.auditor_process import AuditorProcess, write_catalog
from bench.measure import read_cpu_s
from devstack.broker import LocalBroker
from hifi.audit import DEFAULT_AUDIT_TOPIC
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings

DEST = "bench"
MIN_EVENTS = 100_000  # fewer drain within a scrape or two: no rate to speak of (--quick)
_SCRAPE_S = 0.1
_ROLL_S = 10.0
_IDLE_S = 600.0
_PAIR_ATTEMPTS = 3


@dataclass(frozen=True)
class Members:
    """One run: N auditors of one group over the backlog."""

    members: int
    drain_s: float  # from the first record the members read to the last source event
    events: list[int]  # source events each member read in that time
    cpu_s: list[float]  # CPU seconds each member used over the drain

    @property
    def events_per_s(self) -> float:
        """The members' events read together per second of the drain."""
        return sum(self.events) / self.drain_s if self.drain_s > 0 else 0.0

    @property
    def events_per_cpu_s(self) -> float:
        """The members' mean of their events read per CPU-second."""
        rates = [e / c for e, c in zip(self.events, self.cpu_s, strict=True) if c > 0]
        return sum(rates) / len(rates) if rates else 0.0


@dataclass(frozen=True)
class Group:
    one: Members
    two: Members

    @property
    def per_cpu_two_over_one(self) -> float:
        one = self.one.events_per_cpu_s
        return self.two.events_per_cpu_s / one if one else 0.0

    @property
    def two_over_one_drain(self) -> float:
        one, two = self.one.events_per_s, self.two.events_per_s
        return two / one if one else 0.0

    def line(self) -> str:
        return (
            f"bench-auditor: per_cpu_two_over_one={self.per_cpu_two_over_one:.2f}"
            f" two_over_one_drain={self.two_over_one_drain:.2f}"
        )


async def group_phase(
    work: Path, *, events: int, partitions: int, settle_s: float, timeout_s: float
) -> Group:
    """The backlog delivered once, then read by one auditor and by two of one group."""
    topic, prefix = "bench.group", "group"
    events = max(events, MIN_EVENTS)
    work.mkdir(parents=True, exist_ok=True)
    with LocalBroker(log_path=work / "broker-group.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        await kafka_admin.ensure_topics(settings, [topic], partitions=partitions)
        await load.prefill(settings, topic, partitions=partitions, events=events, prefix=prefix)
        drained = await phases.throughput(
            work / "group-connector",
            bootstrap=broker.bootstrap,
            topic=topic,
            events=events,
            prefix=prefix,
            timeout_s=timeout_s,
        )
        if drained.delivered < events:
            raise RuntimeError(f"group: the connector delivered {drained.delivered} of {events}")
        await read_topic(settings, DEFAULT_AUDIT_TOPIC, timeout_s=60)
        write_catalog(work / "group-catalog", dest=DEST, topic=topic, settle_s=settle_s)
        one = await _members(work, broker.bootstrap, topic, 1, "bench.one", events, timeout_s)
        for attempt in range(1, _PAIR_ATTEMPTS + 1):
            group = f"bench.two.{attempt}"
            two = await _members(work, broker.bootstrap, topic, 2, group, events, timeout_s)
            if min(two.events) > 0:
                break
            # one member read the backlog before its partner got a share (a member learns of a
            # join at its next heartbeat): the pair measured nothing; a fresh group reads it again
    return Group(one, two)


async def _members(
    work: Path, bootstrap: str, topic: str, n: int, group: str, events: int, timeout_s: float
) -> Members:
    """Start `n` auditors of `group` on one archive; measure until they read `events`."""
    auditors = [
        AuditorProcess(
            catalog_dir=work / "group-catalog",
            dest=DEST,
            bootstrap=bootstrap,
            archive_dir=work / f"group-archive-{group}",
            audit_topic=DEFAULT_AUDIT_TOPIC,
            log_path=work / f"auditor-{group}-{i}.log",
            roll_s=_ROLL_S,
            until_idle_s=_IDLE_S,
            group_id=group,
        )
        for i in range(n)
    ]
    for auditor in auditors:
        auditor.start()
    try:
        await asyncio.gather(*(a.wait_ready() for a in auditors))
        await _until_each_owns_a_share(auditors, timeout_s)
        return await _drain(auditors, topic, events, timeout_s)
    finally:
        for auditor in auditors:
            auditor.stop()


async def _until_each_owns_a_share(auditors: list[AuditorProcess], timeout_s: float) -> None:
    """Wait until the group has settled: every member owns a share (its `/status`)."""
    deadline = time.monotonic() + timeout_s
    while not all(await asyncio.gather(*(a.owned_shares() for a in auditors))):
        if time.monotonic() >= deadline:
            raise RuntimeError(f"group: not every one of {len(auditors)} auditors owned a share")
        await asyncio.sleep(_SCRAPE_S)


async def _drain(
    auditors: list[AuditorProcess], topic: str, events: int, timeout_s: float
) -> Members:
    """From the moment every member owns a share until they have read `events` between them:
    each member's events and CPU counted from that moment (what one read before the other joined
    is left out of both), the drain from then or from the first record read after."""
    base = [await _reading(a, topic) for a in auditors]
    deadline = time.monotonic() + timeout_s
    first_s: float | None = time.monotonic() if sum(r for r, _ in base) > 0 else None
    while time.monotonic() < deadline:
        now_read = [await _reading(a, topic) for a in auditors]
        now = time.monotonic()
        read = [r for r, _ in now_read]
        if first_s is None and sum(read) > 0:
            first_s = now
        if first_s is not None and sum(read) >= events:
            return Members(
                len(auditors),
                now - first_s,
                [r - b for (r, _), (b, _) in zip(now_read, base, strict=True)],
                [c - b for (_, c), (_, b) in zip(now_read, base, strict=True)],
            )
        await asyncio.sleep(_SCRAPE_S)
    raise RuntimeError(f"group: {len(auditors)} auditor(s) did not read {events} events in time")


async def _reading(auditor: AuditorProcess, topic: str) -> tuple[int, float]:
    """The source events `auditor` has read so far, and its CPU seconds."""
    scrape = await auditor.scrape()
    read = 0 if scrape is None else scrape.records.get(topic, 0)
    return read, read_cpu_s(auditor.pid) or 0.0
