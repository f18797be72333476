"""The ingest scenarios: senders post to an ingest process under a fault; every id answered 2xx is delivered."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from chaos.accounting import settle
from chaos.harness import Daemon, Stage
from chaos.scenarios import Result, Size
from chaos.senders import Senders
from config.streams import hash_token
from devstack.ports import free_port
from hifi.audit import AUDIT_TOPIC_ENV_VAR
from hifi.kafka import admin as kafka_admin

TOKEN = "chaos-ingest-token"  # noqa: S105 (a test token; the stream file holds its hash)
_BATCH_EVENTS = 50
_SENDERS = 8
_ACK_TIMEOUT_S = 2.0  # shorter than the shortest cut, so a cut is answered 503, not waited out


@dataclass
class IngestRun:
    """One ingest scenario in progress: what the fault function may touch."""

    name: str
    stage: Stage
    size: Size
    ingest: Daemon
    senders: Senders
    rng: random.Random
    production_s: float


IngestFault = Callable[[IngestRun], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class IngestScenario:
    """Senders post to ingest at `rate_factor` of `Size.rate_per_s` while `fault` runs."""

    name: str
    fault: IngestFault
    rate_factor: float = 1.0
    expect_503: bool = False  # the fault must be seen by senders as 503s, or the run fails


async def kill_ingest(run: IngestRun) -> None:
    """SIGKILL the ingest process `kills` times, each while it is answering; it is restarted."""
    batch = _BATCH_EVENTS
    for _ in range(run.size.kills):
        # wait until this incarnation has answered a few batches, so the kill hits live requests
        acknowledged = len(run.senders.counts.acknowledged)
        if not await run.senders.wait_for_acknowledged(acknowledged + 3 * batch, 60.0):
            return
        await asyncio.sleep(run.rng.uniform(0.0, 0.5))
        run.ingest.kill9()


async def cut_ingest_broker_link(run: IngestRun) -> None:
    """Every Kafka connection (ingest's, and the connector's) is reset and refused for `cut_s`."""
    await asyncio.sleep(run.production_s * 0.3)
    await run.stage.proxy.cut()
    await asyncio.sleep(run.size.cut_s)
    await run.stage.proxy.restore()


INGEST_SCENARIOS = (
    # slower load: each restart of ingest takes a second or two, which the load should outlast
    IngestScenario("ingest_kill9", kill_ingest, rate_factor=0.2),
    IngestScenario("ingest_broker_cut", cut_ingest_broker_link, rate_factor=0.25, expect_503=True),
)


def _write_stream(directory: Path, name: str, topic: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    keys = {"topic": topic, "tokens_sha256": [hash_token(TOKEN)]}
    lines = [f"{key} = {orjson.dumps(value).decode()}" for key, value in keys.items()]
    (directory / f"{name}.toml").write_text("\n".join(lines) + "\n")


def _ingest_daemon(stage: Stage, name: str, topic: str, port: int, env: dict[str, str]) -> Daemon:
    streams = stage.work_dir / f"streams-{name}"
    _write_stream(streams, name, topic)
    args = ["--streams", str(streams), "--host", "127.0.0.1", "--port", str(port)]
    args += ["--ack-timeout-s", str(_ACK_TIMEOUT_S)]
    return Daemon(
        f"ingest-{name}",
        "ingest",
        args,
        bootstrap=stage.settings.bootstrap,
        log_path=stage.work_dir / f"ingest-{name}.log",
        env=env,
        metrics_port=free_port(),
    )


async def run_ingest_scenario(
    stage: Stage, scenario: IngestScenario, size: Size, seed: int = 1
) -> Result:
    """Start ingest, the connector and the retrier; post under the fault; wait until every
    acknowledged id is delivered; stop; settle by id from what the senders were answered 2xx."""
    name, topic = scenario.name, f"{scenario.name}.events"
    await kafka_admin.ensure_topics(stage.settings, [topic], partitions=4)
    stage.write_destination(name, topic)
    env = {AUDIT_TOPIC_ENV_VAR: f"{name}.audit"}
    port = free_port()
    ingest = _ingest_daemon(stage, name, topic, port, env)
    connector = stage.daemon("connector", name, env=env, metrics_port=free_port())
    retrier = stage.daemon("retrier", name, env=env)
    daemons = [ingest, connector, retrier]
    stage.destination.reset_script()
    for daemon in daemons:
        await daemon.start()
    rate = size.rate_per_s * scenario.rate_factor
    url = f"http://127.0.0.1:{port}/v1/events/{name}"
    try:
        for daemon in (ingest, connector):
            if not await daemon.ready(timeout_s=60.0):
                raise RuntimeError(f"{daemon.name} never became ready (/readyz)")
        async with Senders(
            url, TOKEN, name=name, batch_events=_BATCH_EVENTS, concurrency=_SENDERS
        ) as senders:
            run = IngestRun(
                name, stage, size, ingest, senders, random.Random(seed), size.events / rate
            )
            fault = asyncio.create_task(scenario.fault(run), name=f"fault-{name}")
            try:
                await senders.send_paced(size.events, rate, size.deadline_s)
            except BaseException:
                fault.cancel()
                raise
            await fault
        faults_over = time.monotonic()
        counts = senders.counts
        await stage.destination.wait_for_ids(set(counts.acknowledged), size.deadline_s)
        drain_s = time.monotonic() - faults_over
    finally:
        for daemon in daemons:
            await daemon.stop()
    dead = await stage.dead_letters(name)
    delivered = stage.destination.delivered_ids()
    account = settle(counts.acknowledged, delivered, dead, ())
    problems = []
    if counts.unanswered:
        problems.append(f"{counts.unanswered} batches never answered 2xx")
    if scenario.expect_503 and not counts.statuses[503]:
        problems.append("no 503 while Kafka was unreachable")
    if counts.rejected:
        problems.append(f"{counts.rejected} valid events rejected")
    return Result(
        name,
        account,
        drain_s,
        sum(d.restarts for d in daemons),
        sum(d.kills for d in daemons),
        await stage.handed_off(name),
        notes=counts.line(),
        problems=tuple(problems),
    )
