"""The three-auditor scenario: one destination counted by three auditors of one group, against the run and one auditor.

A flaky destination (20 % of requests fail, as in `flaky_destination`), the connector killed
with SIGKILL while it delivers, then one of the three auditors (a round per two of the size's
kills): first the member that owns the lead share (partition 0: it writes the merged final
minutes, `auditor/lead.py`), then another each round; and a deliberate gap: the connector's
committed offset on partition 1 is moved past `GAP_EVENTS` events before it starts, so they are
never delivered.
Three auditor processes share the destination's six partitions (group `NAME.auditors`, one
archive); a fourth counts it alone (`NAME.single`).
Every minute of every member's `/tables` must equal the run's own count by id (the gap's
events `missing`, in their minute) and the single auditor's row.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import orjson

from chaos import audit
from chaos.accounting import settle
from chaos.harness import Daemon, Stage, now_ms
from chaos.scenarios import Result, Size
from devstack.destination import Reply
from devstack.kafka_tools import move_committed
from devstack.ports import free_port
from hifi.audit import AUDIT_TOPIC_ENV_VAR
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import open_producer

PARTITIONS = 6
GAP_PARTITION = 1
GAP_EVENTS = 7
MEMBERS = 3
# Figures every member and the single auditor must agree on, minute by minute.
FIGURES = ("entered", "delivered", "dead_lettered", "in_retry", "missing", "final")
_CATCH_UP_S = 90.0


@dataclass(frozen=True)
class GroupScenario:
    """A scenario with a group of auditors; run by `run_group_scenario`."""

    name: str
    rate_factor: float = 0.2  # a slower load: the kills land while it runs


SCENARIO = GroupScenario("auditors_three")


async def run_group_scenario(
    stage: Stage, scenario: GroupScenario, size: Size, seed: int = 1
) -> Result:
    name, topic = scenario.name, f"{scenario.name}.events"
    rng = random.Random(seed)
    await kafka_admin.ensure_topics(stage.settings, [topic], partitions=PARTITIONS)
    stage.write_destination(name, topic, accounting=audit.ACCOUNTING)
    env = {AUDIT_TOPIC_ENV_VAR: f"{name}.audit"}
    gap = await _gap(stage, name, topic)
    connector = stage.daemon("connector", name, env=env, metrics_port=free_port())
    retrier = stage.daemon("retrier", name, env=env)
    members = [_auditor(stage, name, env, "auditors", i) for i in range(MEMBERS)]
    single = _auditor(stage, name, env, "single", 0)
    daemons = [connector, retrier, *(d for d, _ in members), single[0]]
    for daemon in daemons:
        await daemon.start()
    rate = size.rate_per_s * scenario.rate_factor
    try:
        if not await connector.ready(timeout_s=120.0):  # seven processes start on a small machine
            raise RuntimeError(f"{connector.name} never became ready (/readyz)")
        stage.destination.set_faults(
            0.2, [Reply(503), Reply(500), Reply(drop=True)], seed=rng.randrange(1000)
        )
        fault = asyncio.create_task(_kills(stage, connector, members, topic, rng, size))
        ids = await _produce(stage, name, topic, size.events, rate)
        await fault
        stage.destination.reset_script()
        faults_over = time.monotonic()
        await stage.destination.wait_for_ids(set(ids), 120.0)
        drain_s = time.monotonic() - faults_over
        await connector.stop()
        await retrier.stop()
        delivered = stage.destination.delivered_ids()
        dead = await stage.dead_letters(name)
        account = settle(set(ids), delivered, dead, set())
        truth = audit.expected_minutes({**ids, **gap}, delivered, dead)
        found = await _tables_agree([u for _, u in [*members, single]], name, truth, gap)
    finally:
        for daemon, _ in [*members, single]:
            await daemon.stop()
        await connector.stop()
        await retrier.stop()
    return Result(
        name,
        account,
        drain_s,
        sum(d.restarts for d in daemons),
        sum(d.kills for d in daemons),
        await stage.handed_off(name),
        found,
        notes=f"auditors={MEMBERS}+1 gap={len(gap)}",
    )


def _auditor(
    stage: Stage, name: str, env: dict[str, str], group: str, index: int
) -> tuple[Daemon, str]:
    archive = stage.work_dir / f"archive-{name}-{group}"
    if index == 0:
        shutil.rmtree(archive, ignore_errors=True)  # a snapshot of an earlier run's broker
    port = free_port()
    args = ["--archive", str(archive), "--archive-roll-s", "1", "--group", f"{name}.{group}"]
    label = f"auditor-{name}-{group}-{index}"
    daemon = Daemon(
        label,
        "auditor",
        ["--dest", name, "--catalog", str(stage.catalog), *args],
        bootstrap=stage.settings.bootstrap,
        log_path=stage.work_dir / f"{label}.log",
        env=env,
        metrics_port=port,
    )
    return daemon, f"http://127.0.0.1:{port}"


async def _gap(stage: Stage, name: str, topic: str) -> dict[str, int]:
    """`GAP_EVENTS` events on one partition the connector will never read: its group's
    committed offset moved past them before it starts."""
    event_ms = now_ms()
    records: list[Any] = [
        (topic, None, orjson.dumps({"id": f"{name}-gap-{i}", "event_time": event_ms}), [])
        for i in range(GAP_EVENTS)
    ]
    async with open_producer(stage.settings) as producer:
        written = await producer.send_all(records, partition=GAP_PARTITION)
    await move_committed(
        stage.settings, f"hifi.connector.{name}", topic, GAP_PARTITION, written[-1].offset + 1
    )
    return {f"{name}-gap-{i}": event_ms for i in range(GAP_EVENTS)}


async def _kills(
    stage: Stage,
    connector: Daemon,
    auditors: list[tuple[Daemon, str]],
    topic: str,
    rng: random.Random,
    size: Size,
) -> None:
    """SIGKILL the connector while it delivers, then one auditor of the group: the lead share's
    member first, another each round after; half as many rounds as `size.kills`, at least one."""
    destination = stage.destination
    lead = await _lead_member([url for _, url in auditors], f"{topic}/0")
    for round_ in range(max(1, size.kills // 2)):
        if not await destination.wait_for_requests(destination.request_count + 5, 60.0):
            return
        await asyncio.sleep(rng.uniform(0.0, 1.0))
        connector.kill9()
        await asyncio.sleep(rng.uniform(1.0, 3.0))
        auditors[(lead + round_) % len(auditors)][0].kill9()


async def _lead_member(urls: list[str], lead_share: str, timeout_s: float = 60.0) -> int:
    """The index of the member whose `/status` owns `lead_share` (the group's first assignment)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.monotonic() < deadline:
            for index, url in enumerate(urls):
                try:
                    status = (await client.get(f"{url}/status")).json()
                except (httpx.HTTPError, ValueError):
                    continue
                if lead_share in status.get("owned_shares", ()):
                    return index
            await asyncio.sleep(0.5)
    raise RuntimeError(f"no auditor of the group owned {lead_share} within {timeout_s:g} s")


async def _produce(
    stage: Stage, name: str, topic: str, count: int, rate_per_s: float
) -> dict[str, int]:
    """`count` events keyed by id (spread over the partitions) at `rate_per_s`."""
    ids: dict[str, int] = {}
    per_tick = max(1, int(rate_per_s // 10))
    async with open_producer(stage.settings) as producer:
        for start in range(0, count, per_tick):
            tick_started = time.monotonic()
            records: list[Any] = []
            for seq in range(start, min(start + per_tick, count)):
                event_id, event_ms = f"{name}-{seq}", now_ms()
                event = {"id": event_id, "event_time": event_ms, "seq": seq}
                records.append((topic, event_id.encode(), orjson.dumps(event), []))
                ids[event_id] = event_ms
            await producer.send_all(records)
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - tick_started)))
    return ids


async def _tables_agree(
    urls: list[str], dest: str, truth: dict[int, audit.Expected], gap: dict[str, int]
) -> audit.AuditAccount:
    """Wait until every auditor's final minutes equal the run's (the gap's events missing) and
    each other's; the first member's account then, its mismatches with the others' added."""
    missing = {audit.minute_of(at_ms): 0 for at_ms in gap.values()}
    for at_ms in gap.values():
        missing[audit.minute_of(at_ms)] += 1
    final_ms = max(truth) + audit.MINUTE_MS + round(audit.SETTLE_S * 1000)
    deadline = time.monotonic() + max(0.0, (final_ms - now_ms()) / 1000) + _CATCH_UP_S
    result = audit.AuditAccount.unread("no auditor answered")
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            tables = [await audit.tables(client, url, dest) for url in urls]
            if all(t is not None for t in tables):
                result = _compare([t for t in tables if t is not None], truth, missing)
                if not result.mismatches:
                    return result
            if time.monotonic() > deadline:
                return result
            await asyncio.sleep(1.0)


def _compare(
    tables: list[list[dict[str, Any]]], truth: dict[int, audit.Expected], missing: dict[int, int]
) -> audit.AuditAccount:
    """The first table against the run (its missing events the gap's), the others against it."""
    first = tables[0]
    without_gap = [{**r, "missing": r["missing"] - missing.get(_ms(r["minute"]), 0)} for r in first]
    result = audit.check(without_gap, truth)
    mismatches = list(result.mismatches)
    if result.missing:
        mismatches.append(f"missing {result.missing} beyond the gap of {sum(missing.values())}")
    reference = _figures(first)
    for i, other in enumerate(tables[1:], start=1):
        if _figures(other) != reference:
            who = f"member {i}" if i < MEMBERS else "the single auditor"
            mismatches.append(f"{who}'s table differs from member 0's")
    return audit.AuditAccount(
        result.minutes,
        result.entered,
        result.delivered,
        result.dead_lettered,
        result.in_retry,
        result.missing,
        result.provisional,
        tuple(mismatches),
    )


def _figures(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {r["minute"]: tuple(r[f] for f in FIGURES) for r in rows if r["entered"]}


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
