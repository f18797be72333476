"""The chaos scenarios: load, one kind of fault, then an account of every event id."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson

from chaos.accounting import Account, settle
from chaos.harness import Daemon, Stage, now_ms
from devstack.destination import Reply
from hifi import kafka, kafka_admin


@dataclass(frozen=True)
class Size:
    """How hard a run pushes: the full `make chaos` or the short version inside `make test`."""

    events: int
    rate_per_s: int
    kills: int
    outage_s: float
    cut_s: float
    deadline_s: float


FULL = Size(events=20_000, rate_per_s=2_000, kills=5, outage_s=60.0, cut_s=15.0, deadline_s=420.0)
QUICK = Size(events=2_000, rate_per_s=1_000, kills=2, outage_s=4.0, cut_s=3.0, deadline_s=150.0)


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


@dataclass(frozen=True)
class Result:
    name: str
    account: Account
    drain_s: float
    restarts: int
    kills: int

    def line(self) -> str:
        a = self.account
        return (
            f"{self.name:<22} produced={a.produced:<6} delivered={a.delivered:<6} "
            f"dead_lettered={a.dead_lettered:<4} lost={a.lost} "
            f"wrong_dlq={a.wrong_dlq + a.missing_dlq} duplicated={a.duplicated_pct:.1f}% "
            f"drain_s={self.drain_s:.1f} kills={self.kills} restarts={self.restarts}"
            + (f" lost_sample={list(a.lost_sample)}" if a.lost else "")
            + (f" wrong_sample={list(a.wrong_dlq_sample)}" if a.wrong_dlq else "")
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
    Scenario("retrier_kill9", kill_retrier, destination_keys={"local_retry_attempts": 1}),
    Scenario("flaky_destination", flaky_destination),
    Scenario("destination_down", destination_down),
    Scenario("poison_and_malformed", poison_and_malformed, poison_every=1000, malformed=10),
    Scenario("broker_link_cut", cut_broker_link),
)


def _healthy(run: Run) -> None:
    run.stage.destination.reset_script()
    run.stage.destination.reject_poison("poison")


async def _produce_paced(run: Run, topic: str, poison_every: int) -> tuple[set[str], set[str]]:
    """Produce `size.events` events at `size.rate_per_s`; returns (ids, poison ids)."""
    ids: set[str] = set()
    poison: set[str] = set()
    per_tick = max(1, int(run.rate_per_s // 10))
    async with kafka.producer(run.stage.settings) as producer:
        for start in range(0, run.size.events, per_tick):
            tick_started = time.monotonic()
            records: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
            for seq in range(start, min(start + per_tick, run.size.events)):
                event_id = f"{run.name}-{seq}"
                is_poison = poison_every > 0 and seq % poison_every == poison_every // 2
                event = {"id": event_id, "event_time": now_ms(), "seq": seq, "poison": is_poison}
                records.append((topic, event_id.encode(), orjson.dumps(event), []))
                ids.add(event_id)
                if is_poison:
                    poison.add(event_id)
            await producer.send_all(records)
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - tick_started)))
    return ids, poison


async def run_scenario(stage: Stage, scenario: Scenario, size: Size, seed: int = 1) -> Result:
    """Start the daemons, produce under the fault, wait for the drain, stop, and settle by id."""
    name, topic = scenario.name, f"{scenario.name}.events"
    await kafka_admin.ensure_topics(stage.settings, [topic], partitions=4)
    stage.write_destination(name, topic, **scenario.destination_keys)
    rate = size.rate_per_s * scenario.rate_factor
    run = Run(
        name,
        stage,
        size,
        stage.daemon("connector", name),
        stage.daemon("retrier", name),
        random.Random(seed),
        rate,
        production_s=size.events / rate,
    )
    _healthy(run)
    await run.connector.start()
    await run.retrier.start()
    try:
        fault = asyncio.create_task(scenario.fault(run), name=f"fault-{name}")
        ids, poison = await _produce_paced(run, topic, scenario.poison_every)
        malformed = await stage.produce(topic, [b"{not json"] * scenario.malformed)
        await fault
        faults_over = time.monotonic()
        await stage.destination.wait_for_ids(ids - poison, size.deadline_s)
        drain_s = time.monotonic() - faults_over
    finally:
        _healthy(run)
        await run.connector.stop()
        await run.retrier.stop()
    dead = await stage.dead_letters(name)
    expected_dlq = poison | set(malformed)
    account = settle(ids | set(malformed), stage.destination.delivered_ids(), dead, expected_dlq)
    restarts = run.connector.restarts + run.retrier.restarts
    return Result(name, account, drain_s, restarts, run.connector.kills + run.retrier.kills)
