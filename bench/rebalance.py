"""`make bench-rebalance`: what a scaling step costs a consumer group, per assignor and membership.

Members are hifi group consumers (`hifi.kafka.consumer`, the worker's own, with the assignor and
instance id of `KafkaSettings`) in one process, on one topic of `--partitions` partitions of a
fresh local Tansu broker; each scenario uses a new group. A partition is owned from its member's
assignment callback to its revocation, or to the moment its member stops polling. Measured:

1. scale-out 2 -> 3 per assignor (roundrobin, range, sticky): partitions whose owner changed,
   and the seconds from the third member's start until every partition is owned again;
2. scale-in 3 -> 2, dynamic and static members: the stall, i.e. seconds from the stop until the
   stopped member's partitions are owned again (a static member sends no LeaveGroup, so its
   partitions wait for the session timeout);
3. a restart within the session timeout (the group's oldest member is back `--restart-after`
   seconds after its stop), dynamic and static: whether it got the same partitions back, how
   often the other members' partitions were revoked meanwhile, and how long its own were idle.

Results: a table, and a JSON file in bench/results/ with the machine's load before and after.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click
import orjson
from aiokafka import TopicPartition

from bench import machine
from bench.report import say, write_results
from devstack.broker import LocalBroker
from hifi.kafka import admin as kafka_admin
from hifi.kafka.consuming import open_consumer
from hifi.kafka.settings import Assignor, KafkaSettings

RESULTS_DIR = Path(__file__).parent / "results"
_QUIET_S = 2.0  # an assignment is settled once no member's assignment changed for this long
_SETTLE_TIMEOUT_S = 120.0


@dataclass
class Ownership:
    """Who owns each partition, since when, and every change (seconds since the scenario began)."""

    partitions: int
    owners: dict[int, str] = field(default_factory=dict)
    unowned_since: dict[int, float] = field(default_factory=dict)
    idle: list[tuple[int, float, float]] = field(default_factory=list)  # partition, from, to
    revocations: dict[str, int] = field(default_factory=dict)
    started_s: float = field(default_factory=time.monotonic)
    changed_s: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.unowned_since = dict.fromkeys(range(self.partitions), 0.0)

    def now(self) -> float:
        return time.monotonic() - self.started_s

    def take(self, member: str, partitions: set[int]) -> None:
        now = self.now()
        for p in partitions:
            self.owners[p] = member
            began = self.unowned_since.pop(p, None)
            if began is not None:
                self.idle.append((p, began, now))
        self._touch(now)

    def release(self, member: str, partitions: set[int], *, revoked: bool) -> None:
        now = self.now()
        for p in partitions:
            if self.owners.get(p) == member:
                del self.owners[p]
                self.unowned_since[p] = now
        if revoked:
            self.revocations[member] = self.revocations.get(member, 0) + 1
        self._touch(now)

    def of(self, member: str) -> set[int]:
        return {p for p, owner in self.owners.items() if owner == member}

    def idle_after(self, since_s: float, partitions: set[int]) -> float:
        """The longest time one of `partitions` went without an owner, from `since_s` on."""
        spans = [end - max(begin, since_s) for p, begin, end in self.idle if p in partitions]
        spans = [span for span in spans if span > 0]
        return max(spans, default=0.0)

    def _touch(self, now: float) -> None:
        self.changed_s = now
        self.changed.set()

    async def settled(self, members: set[str]) -> dict[int, str]:
        """Wait until every partition is owned, only by `members`, each of which owns some, and
        nothing changed for `_QUIET_S`; the owners then."""
        deadline = self.now() + _SETTLE_TIMEOUT_S
        while True:
            owned_by = set(self.owners.values())
            complete = len(self.owners) == self.partitions and owned_by == members
            quiet_for = self.now() - self.changed_s
            if complete and quiet_for >= _QUIET_S:
                return dict(self.owners)
            if self.now() > deadline:
                raise TimeoutError(f"no settled assignment for {sorted(members)}: {self.owners}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(0.05, _QUIET_S - quiet_for))


class Member:
    """One group member polling until stopped; its assignment goes to the `Ownership`."""

    def __init__(
        self, name: str, settings: KafkaSettings, group: str, topic: str, ownership: Ownership
    ) -> None:
        self.name, self._settings, self._group, self._topic = name, settings, group, topic
        self._ownership = ownership
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.session_timeout_ms = 10_000  # the connector's: aiokafka's default

    def start(self) -> Member:
        self._task = asyncio.create_task(self._run(), name=f"member-{self.name}")
        return self

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        ownership, name = self._ownership, self.name

        def assigned(tps: set[TopicPartition]) -> None:
            ownership.take(name, {tp.partition for tp in tps})

        async def revoked(tps: set[TopicPartition]) -> None:
            ownership.release(name, {tp.partition for tp in tps}, revoked=True)

        async with open_consumer(
            self._settings,
            group_id=self._group,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.session_timeout_ms // 10,
        ) as consumer:
            consumer.subscribe([self._topic], on_assigned=assigned, on_revoked=revoked)
            while not self._stop.is_set():
                await consumer.getmany(timeout_ms=100)
            ownership.release(name, ownership.of(name), revoked=False)


@dataclass
class Scenario:
    """A fresh group of members on the topic, stopped when the block exits."""

    base: KafkaSettings
    topic: str
    partitions: int
    session_timeout_ms: int
    assignor: Assignor = "roundrobin"
    static: bool = False
    group: str = field(default_factory=lambda: f"bench-rebalance-{uuid.uuid4().hex[:8]}")
    members: dict[str, Member] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ownership = Ownership(self.partitions)

    def start(self, name: str) -> None:
        settings = self.base.model_copy(update={"assignor": self.assignor})
        if self.static:
            settings = settings.as_static_member(f"{self.group}-{name}", where="bench")
        member = Member(name, settings, self.group, self.topic, self.ownership)
        member.session_timeout_ms = self.session_timeout_ms
        self.members[name] = member.start()

    async def stop(self, name: str) -> None:
        await self.members.pop(name).stop()

    async def settled(self) -> dict[int, str]:
        return await self.ownership.settled(set(self.members))

    async def close(self) -> None:
        for name in list(self.members):
            await self.stop(name)


async def scale_out(scenario: Scenario) -> dict[str, object]:
    """2 -> 3 members: partitions whose owner changed, seconds until every one is owned again."""
    scenario.start("a")
    scenario.start("b")
    before = await scenario.settled()
    began = scenario.ownership.now()
    scenario.start("c")
    after = await scenario.settled()
    moved = sum(1 for p, owner in after.items() if before[p] != owner)
    return {
        "assignor": scenario.assignor,
        "moved": moved,
        "minimum": sum(1 for owner in after.values() if owner == "c"),
        "longest_unowned_s": round(scenario.ownership.idle_after(began, set(after)), 2),
    }


async def scale_in(scenario: Scenario) -> dict[str, object]:
    """3 -> 2 members: seconds until the stopped member's partitions are owned again."""
    for name in ("a", "b", "c"):
        scenario.start(name)
    before = await scenario.settled()
    left = {p for p, owner in before.items() if owner == "c"}
    began = scenario.ownership.now()
    await scenario.stop("c")
    await scenario.settled()
    others = set(before) - left
    return {
        "membership": "static" if scenario.static else "dynamic",
        "stall_s": round(scenario.ownership.idle_after(began, left), 2),
        "others_unowned_s": round(scenario.ownership.idle_after(began, others), 2),
    }


async def restart(scenario: Scenario, restart_after_s: float) -> dict[str, object]:
    """Stop the first member (the group's oldest, so no join order keeps its place by chance)
    and start it again `restart_after_s` later, under the same name (and instance id)."""
    for name in ("a", "b", "c"):
        scenario.start(name)
        await scenario.settled()
    before = await scenario.settled()
    mine = {p for p, owner in before.items() if owner == "a"}
    revocations = dict(scenario.ownership.revocations)
    began = scenario.ownership.now()
    await scenario.stop("a")
    await asyncio.sleep(restart_after_s)
    scenario.start("a")
    after = await scenario.settled()
    again = {p for p, owner in after.items() if owner == "a"}
    seen = scenario.ownership.revocations
    return {
        "membership": "static" if scenario.static else "dynamic",
        "kept": again == mine,
        "partitions_before": sorted(mine),
        "partitions_after": sorted(again),
        "revocations_of_others": max(seen.get(n, 0) - revocations.get(n, 0) for n in "bc"),
        "idle_s": round(scenario.ownership.idle_after(began, mine), 2),
        "others_unowned_s": round(scenario.ownership.idle_after(began, set(before) - mine), 2),
    }


async def _bench(bootstrap: str, plan: Plan) -> dict[str, list[dict[str, object]]]:
    settings = KafkaSettings(bootstrap=bootstrap)
    topic = f"bench-rebalance-{uuid.uuid4().hex[:8]}"
    await kafka_admin.ensure_topics(settings, [topic], partitions=plan.partitions)
    results: dict[str, list[dict[str, object]]] = {"scale_out": [], "scale_in": [], "restart": []}

    def group(assignor: Assignor = "roundrobin", *, static: bool = False) -> Scenario:
        return Scenario(settings, topic, plan.partitions, plan.session_ms, assignor, static)

    async def restarted(scenario: Scenario) -> dict[str, object]:
        return await restart(scenario, plan.restart_after_s)

    for run in range(1, plan.repeats + 1):
        steps: list[tuple[str, Scenario, Callable[[Scenario], Awaitable[dict[str, object]]]]] = [
            ("scale_out", group("roundrobin"), scale_out),
            ("scale_out", group("range"), scale_out),
            ("scale_out", group("sticky"), scale_out),
            ("scale_in", group(static=False), scale_in),
            ("scale_in", group(static=True), scale_in),
            ("restart", group(static=False), restarted),
            ("restart", group(static=True), restarted),
        ]
        for kind, scenario, measure in steps:
            try:
                found = await measure(scenario)
            finally:
                await scenario.close()
            say(f"run {run} {kind}: {found}")
            results[kind].append({"run": run, **found})
    return results


@dataclass(frozen=True)
class Plan:
    """How big the bench is."""

    partitions: int
    repeats: int
    session_ms: int
    restart_after_s: float


def _load() -> list[float]:
    return [float(value) for value in Path("/proc/loadavg").read_text().split()[:3]]


@click.command()
@click.option("--partitions", type=click.IntRange(3, 1000), default=12, show_default=True)
@click.option("--repeats", type=click.IntRange(1, 20), default=3, show_default=True)
@click.option(
    "--session-timeout-ms",
    "session_ms",
    type=click.IntRange(6000, 300_000),
    default=10_000,
    show_default=True,
    help="The members' session timeout (10 s: aiokafka's default, which the connector keeps).",
)
@click.option(
    "--restart-after",
    "restart_after_s",
    type=click.FloatRange(0, 60),
    default=2.0,
    show_default=True,
    help="Seconds between a member's stop and its restart (within the session timeout).",
)
def main(partitions: int, repeats: int, session_ms: int, restart_after_s: float) -> None:
    """Partitions moved on a scale-out, the stall after a scale-in and a restart's effect."""
    plan = Plan(partitions, repeats, session_ms, restart_after_s)
    started = datetime.now(UTC)
    load_before = _load()
    work = Path(tempfile.mkdtemp(prefix="hifi-bench-rebalance-"))
    with LocalBroker(log_path=work / "tansu.log") as broker:
        results = asyncio.run(_bench(broker.bootstrap, plan))
    report = {
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": "make bench-rebalance (python -m bench.rebalance)",
        "broker": "Tansu (devstack.broker.LocalBroker)",
        "machine": machine.describe(),
        "loadavg_before": load_before,
        "loadavg_after": _load(),
        "plan": asdict(plan),
        **results,
    }
    path = write_results(RESULTS_DIR, "rebalance", started, report)
    print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    print(f"results: {path} (load average {load_before} -> {report['loadavg_after']})")


if __name__ == "__main__":
    main()
