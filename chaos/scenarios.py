"""The chaos scenarios: load, one kind of fault, then an account of every event id."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson

from chaos import audit, outage
from chaos.accounting import Account, settle
from chaos.harness import Daemon, Stage, now_ms
from devstack.destination import Reply
from devstack.ports import free_port
from hifi.audit import AUDIT_TOPIC_ENV_VAR
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import open_producer


@dataclass(frozen=True)
class Size:
    """How hard a run pushes: the full `make chaos` or the short version inside `make test`."""

    events: int
    rate_per_s: int
    kills: int
    outage_s: float
    cut_s: float
    deadline_s: float
    # an outage longer than `settle_s` (`chaos/outage.py`): at least this long, with this
    # `settle_s`, and in any case until a minute of its events became final while it lasted
    long_outage_s: float = 0.0
    long_settle_s: float = 5.0


FULL = Size(
    events=20_000,
    rate_per_s=2_000,
    kills=5,
    outage_s=60.0,
    cut_s=15.0,
    deadline_s=420.0,
    long_outage_s=600.0,
    long_settle_s=300.0,  # the default
)
QUICK = Size(events=2_000, rate_per_s=1_000, kills=2, outage_s=4.0, cut_s=3.0, deadline_s=150.0)
# After its last minute should be final, how long an auditor killed late may take to catch up.
_AUDIT_CATCH_UP_S = 90.0


@dataclass
class Run:
    """One scenario in progress: what the fault function may touch."""

    name: str
    stage: Stage
    size: Size
    connector: Daemon
    retrier: Daemon
    rng: random.Random
    rate_per_s: float
    production_s: float = 0.0
    auditor: Daemon | None = None  # with an audited scenario
    auditor_url: str = ""
    settle_s: float = audit.SETTLE_S  # the auditor's, when audited
    notes: list[str] = field(default_factory=list)  # what the fault saw, for the result line


@dataclass(frozen=True)
class Result:
    name: str
    account: Account
    drain_s: float
    restarts: int
    kills: int
    handed_off: int  # records written to NAME.retry_in: an event once per hand-off
    audit: audit.AuditAccount | None = None  # the auditor's tables, in an audited scenario
    max_handed_off: int | None = None  # the scenario's bound on `handed_off`, if it has one
    max_refused: int | None = None  # the scenario's bound on events dead-lettered as refused
    notes: str = ""  # the scenario's own figures, after the account
    problems: tuple[str, ...] = ()  # what else failed the run (an ingest batch never answered 2xx)

    @property
    def within_bounds(self) -> bool:
        """Hand-offs and refused events no more than the scenario allows."""
        handed_off_ok = self.max_handed_off is None or self.handed_off <= self.max_handed_off
        refused_ok = self.max_refused is None or self.account.dead_lettered <= self.max_refused
        return handed_off_ok and refused_ok

    @property
    def ok(self) -> bool:
        audit_ok = self.audit is None or self.audit.ok
        return self.account.ok and audit_ok and self.within_bounds and not self.problems

    def line(self) -> str:
        a = self.account
        return (
            f"{self.name:<22} produced={a.produced:<6} delivered={a.delivered:<6} "
            f"dead_lettered={a.dead_lettered:<4} handed_off={self.handed_off:<6} lost={a.lost} "
            f"wrong_dlq={a.wrong_dlq + a.missing_dlq} duplicated={a.duplicated_pct:.1f}% "
            f"drain_s={self.drain_s:.1f} kills={self.kills} restarts={self.restarts}"
            + (f" lost_sample={list(a.lost_sample)}" if a.lost else "")
            + (f" wrong_sample={list(a.wrong_dlq_sample)}" if a.wrong_dlq else "")
            + (f" {self.notes}" if self.notes else "")
            + (f" problems={list(self.problems)}" if self.problems else "")
            + (f" {self.audit.line()}" if self.audit is not None else "")
            + (
                f" handed_off_over_bound={self.max_handed_off}"
                if self.max_handed_off is not None and self.handed_off > self.max_handed_off
                else ""
            )
            + (
                f" refused_over_bound={self.max_refused}"
                if self.max_refused is not None and self.account.dead_lettered > self.max_refused
                else ""
            )
        )


Fault = Callable[[Run], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: Fault
    poison_every: int = 0
    malformed: int = 0
    rate_factor: float = 1.0  # of Size.rate_per_s, for faults that need a longer load
    destination_keys: dict[str, object] = field(default_factory=dict)
    audited: bool = False  # an auditor process runs too; its final minutes are checked by id
    max_handed_off: int | None = None  # at most this many hand-offs, or the run fails
    # Credentials refused for a while: events dead-lettered then (`http_4xx`) are expected, up
    # to this many, or the run fails.
    max_refused: int | None = None
    long_settle: bool = False  # audited with the size's `long_settle_s`
    # what else to check once the run is over (`chaos/outage.py`): problems, for the result
    after: Callable[[Run], Coroutine[Any, Any, tuple[str, ...]]] | None = None


async def _at(run: Run, fraction: float) -> None:
    """Sleep until `fraction` of the production window has passed."""
    await asyncio.sleep(run.production_s * fraction)


async def kill_connector(run: Run) -> None:
    """SIGKILL the connector `kills` times, each at a random moment while it is delivering."""
    destination = run.stage.destination
    for _ in range(run.size.kills):
        # Wait until this incarnation is delivering, so the kill hits live work; a restart takes
        # a session timeout or so, which the slower load of this scenario is paced to outlast.
        if not await destination.wait_for_requests(destination.request_count + 5, 60.0):
            return
        await asyncio.sleep(run.rng.uniform(0.0, 1.0))
        run.connector.kill9()


async def kill_connector_and_auditor(run: Run) -> None:
    """SIGKILL the connector while it delivers, then the auditor, `kills` times each."""
    destination, auditor = run.stage.destination, run.auditor
    assert auditor is not None, "an audited scenario"
    for _ in range(run.size.kills):
        if not await destination.wait_for_requests(destination.request_count + 5, 60.0):
            return
        await asyncio.sleep(run.rng.uniform(0.0, 1.0))
        run.connector.kill9()
        await asyncio.sleep(run.rng.uniform(1.0, 4.0))
        auditor.kill9()


async def kill_retrier(run: Run) -> None:
    """Half the requests fail so events wait in the retry tiers; SIGKILL the retrier meanwhile."""
    run.stage.destination.set_faults(0.5, [Reply(503)], seed=run.rng.randrange(1000))
    for _ in range(run.size.kills):
        await asyncio.sleep(run.production_s / (run.size.kills + 1))
        run.retrier.kill9()
    await asyncio.sleep(2.0)
    _healthy(run)


async def flaky_destination(run: Run) -> None:
    """20 % of requests: 5xx, 429 with Retry-After, timeouts and dropped connections."""
    run.stage.destination.set_faults(
        0.2,
        [
            Reply(503),
            Reply(500),
            Reply(429, retry_after="1"),
            Reply(200, delay_s=3.0),
            Reply(drop=True),
        ],
        seed=run.rng.randrange(1000),
    )
    await _at(run, 1.0)


async def destination_down(run: Run) -> None:
    """The destination refuses connections for `outage_s` in the middle of the load."""
    await _at(run, 0.3)
    await run.stage.destination.set_down(True)
    await asyncio.sleep(run.size.outage_s)
    await run.stage.destination.set_down(False)


async def token_refused(run: Run) -> None:
    """The destination refuses the credentials (401) for `outage_s` in the middle of the load,
    as after a token rotated on one side only."""
    await _at(run, 0.3)
    run.stage.destination.set_faults(1.0, [Reply(401)], seed=run.rng.randrange(1000))
    await asyncio.sleep(run.size.outage_s)
    _healthy(run)


async def poison_and_malformed(run: Run) -> None:
    """No extra fault: the poison events and malformed records come with the load itself."""
    await _at(run, 1.0)


async def cut_broker_link(run: Run) -> None:
    """Every Kafka connection is reset and refused for `cut_s`, then restored."""
    await _at(run, 0.3)
    await run.stage.proxy.cut()
    await asyncio.sleep(run.size.cut_s)
    await run.stage.proxy.restore()


SCENARIOS = (
    Scenario("connector_kill9", kill_connector, rate_factor=0.1),
    Scenario(
        "auditor_kill9",
        kill_connector_and_auditor,
        poison_every=1000,
        malformed=10,
        rate_factor=0.1,
        audited=True,
    ),
    Scenario("retrier_kill9", kill_retrier, destination_keys={"local_retry_attempts": 1}),
    Scenario("flaky_destination", flaky_destination),
    # The circuit breaker opens within the first refusals: the batches in flight then (8 slots
    # of 200) are handed off, then one probe event per half-open (at most 9 in a 60 s outage).
    Scenario("destination_down", destination_down, max_handed_off=8 * 200 + 16),
    # A refused token: the batches that met the 401 before the breaker opened (8 slots of 200)
    # are dead-lettered whole, then one probe event per half-open; the rest waits in Kafka.
    Scenario("token_refused", token_refused, max_refused=8 * 200 + 16),
    # Down (503) past `settle_s`: late, not lost; no loss alarm, the account by id agrees.
    Scenario(
        "outage_past_settle",
        outage.destination_down_past_settle,
        audited=True,
        long_settle=True,
        after=outage.after_outage,
    ),
    Scenario("poison_and_malformed", poison_and_malformed, poison_every=1000, malformed=10),
    Scenario("broker_link_cut", cut_broker_link),
)


async def _wait_for_outcomes(run: Run, ids: set[str], *, refused: bool) -> None:
    """Wait until every id was delivered, or, where refused credentials dead-letter some (the
    DLQ read again each second), delivered or dead-lettered; at most `deadline_s`."""
    destination, deadline_s = run.stage.destination, run.size.deadline_s
    if not refused:
        await destination.wait_for_ids(ids, deadline_s)
        return
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if await destination.wait_for_ids(ids, 1.0):
            return
        ids = ids - set(await run.stage.dead_letters(run.name))


async def _wait_for_dead_letters(run: Run, expected: set[str]) -> None:
    """Wait until `expected` (origins or ids) are in the DLQ, read again each second; at most
    `deadline_s` (the account then says what is missing). A poison event handed off before its
    bisection reaches the DLQ through the retrier, whose re-offer gets the same 400."""
    deadline = time.monotonic() + run.size.deadline_s
    while expected and time.monotonic() < deadline:
        expected = expected - set(await run.stage.dead_letters(run.name))
        if expected:
            await asyncio.sleep(1.0)


def _healthy(run: Run) -> None:
    run.stage.destination.reset_script()
    run.stage.destination.reject_poison("poison")


async def _produce_paced(
    run: Run, topic: str, poison_every: int
) -> tuple[dict[str, int], set[str]]:
    """Produce `size.events` events at `size.rate_per_s`; returns (event time by id, poison ids)."""
    ids: dict[str, int] = {}
    poison: set[str] = set()
    per_tick = max(1, int(run.rate_per_s // 10))
    async with open_producer(run.stage.settings) as producer:
        for start in range(0, run.size.events, per_tick):
            tick_started = time.monotonic()
            records: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
            for seq in range(start, min(start + per_tick, run.size.events)):
                event_id = f"{run.name}-{seq}"
                is_poison = poison_every > 0 and seq % poison_every == poison_every // 2
                event_ms = now_ms()
                event = {"id": event_id, "event_time": event_ms, "seq": seq, "poison": is_poison}
                records.append((topic, event_id.encode(), orjson.dumps(event), []))
                ids[event_id] = event_ms
                if is_poison:
                    poison.add(event_id)
            await producer.send_all(records)
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - tick_started)))
    return ids, poison


def _prepare(stage: Stage, scenario: Scenario, size: Size, seed: int) -> Run:
    """The destination file and the daemons of a scenario; with an auditor when it is audited."""
    name, topic = scenario.name, f"{scenario.name}.events"
    accounting = audit.ACCOUNTING if scenario.audited else None
    if accounting is not None and scenario.long_settle:
        accounting = {**accounting, "settle_s": size.long_settle_s}
    stage.write_destination(name, topic, accounting=accounting, **scenario.destination_keys)
    env = {AUDIT_TOPIC_ENV_VAR: f"{name}.audit"} if scenario.audited else None
    rate = size.rate_per_s * scenario.rate_factor
    run = Run(
        name,
        stage,
        size,
        stage.daemon("connector", name, env=env, metrics_port=free_port()),
        stage.daemon("retrier", name, env=env),
        random.Random(seed),
        rate,
        production_s=size.events / rate,
    )
    if scenario.audited:
        archive = stage.work_dir / f"archive-{name}"
        shutil.rmtree(archive, ignore_errors=True)  # a snapshot of an earlier run's broker
        port = free_port()
        args = ["--archive", str(archive), "--archive-roll-s", "1"]
        run.auditor = stage.daemon("auditor", name, args=args, env=env, metrics_port=port)
        run.auditor_url = f"http://127.0.0.1:{port}"
        run.settle_s = size.long_settle_s if scenario.long_settle else audit.SETTLE_S
    return run


async def run_scenario(stage: Stage, scenario: Scenario, size: Size, seed: int = 1) -> Result:
    """Start the daemons, produce under the fault, wait for the drain, stop, and settle by id."""
    name, topic = scenario.name, f"{scenario.name}.events"
    await kafka_admin.ensure_topics(stage.settings, [topic], partitions=4)
    run = _prepare(stage, scenario, size, seed)
    daemons = [run.connector, run.retrier, *([run.auditor] if run.auditor else [])]
    _healthy(run)
    for daemon in daemons:
        await daemon.start()
    try:
        # The fault's timing counts from a connector that has its partitions: a group's first
        # join can take longer than a short run's whole production.
        if not await run.connector.ready(timeout_s=60.0):
            raise RuntimeError(f"{run.connector.name} never became ready (/readyz)")
        try:
            fault = asyncio.create_task(scenario.fault(run), name=f"fault-{name}")
            ids, poison = await _produce_paced(run, topic, scenario.poison_every)
            malformed = await stage.produce(topic, [b"{not json"] * scenario.malformed)
            await fault
            faults_over = time.monotonic()
            await _wait_for_outcomes(
                run, set(ids) - poison, refused=scenario.max_refused is not None
            )
            # the malformed records come last: stopping before they are read would leave them
            # in Kafka, uncommitted (safe, but not yet in the DLQ this account reads)
            await _wait_for_dead_letters(run, poison | set(malformed))
            drain_s = time.monotonic() - faults_over
        finally:
            _healthy(run)
            await run.connector.stop()
            await run.retrier.stop()
        dead = await stage.dead_letters(name)
        handed_off = await stage.handed_off(name)
        delivered = stage.destination.delivered_ids()
        expected_dlq = poison | set(malformed)
        if scenario.max_refused is not None:  # dead-lettered as refused: counted against the bound
            expected_dlq |= {i for i, reason in dead.items() if reason == "http_4xx"} - poison
        account = settle(set(ids) | set(malformed), delivered, dead, expected_dlq)
        audited = None
        problems: tuple[str, ...] = ()
        if run.auditor is not None:
            audited = await _audit(run, {**ids, **malformed}, delivered, dead)
            if scenario.after is not None:
                problems = await scenario.after(run)
    finally:
        if run.auditor is not None:
            await run.auditor.stop()
    restarts = sum(daemon.restarts for daemon in daemons)
    kills = sum(d.kills for d in daemons)
    return Result(
        name,
        account,
        drain_s,
        restarts,
        kills,
        handed_off,
        audited,
        scenario.max_handed_off,
        scenario.max_refused,
        notes=" ".join(run.notes),
        problems=problems,
    )


async def _audit(
    run: Run, produced_ms: dict[str, int], delivered: list[str], dead: dict[str, str]
) -> audit.AuditAccount:
    """Once the last minute with events should be final, the auditor's tables against the run."""
    expected = audit.expected_minutes(produced_ms, delivered, dead)
    final_ms = max(expected) + audit.MINUTE_MS + round(run.settle_s * 1000)
    timeout_s = max(0.0, (final_ms - now_ms()) / 1000) + _AUDIT_CATCH_UP_S
    return await audit.account(run.auditor_url, run.name, expected, timeout_s=timeout_s)
