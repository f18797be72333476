"""The dashboard's events waiting in retry against the auditor's `in retry`, with a real
connector, retrier and auditor, a real broker and a destination answering 503."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from auditor.daemon import Auditor
from connector.daemon import Connector
from devstack.destination import Reply, TestDestination
from devstack.kafka_tools import produce_events
from devstack.ports import free_port
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from retrier.daemon import DashboardOptions, Retrier
from tests.auditor.support import audited_destination
from tests.helpers import events, running, until
from tests.retrier.support import collect, headers_of

pytestmark = [pytest.mark.integration]

TWICE, ONCE = 20, 10  # events handed off twice (waiting in tier 1), once (in NAME.retry_out)


async def _handed_off(settings: KafkaSettings, topic: str, *, attempt: int, count: int) -> None:
    """Wait until `count` hand-offs of `attempt` are in NAME.retry_in."""
    seen: Counter[bytes] = Counter()
    for _ in range(120):
        records = await collect(settings, topic, count, timeout_s=1.0)
        seen = Counter(headers_of(r)["hifi-attempt"] for r in records)
        if seen[str(attempt).encode()] >= count:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"hand-offs by attempt in {topic}: {dict(seen)}")


async def _agreed(http: httpx.AsyncClient, dest: str) -> tuple[dict[str, Any], int]:
    """The dashboard's retry panel once it shows every stage settled, and the auditor's events
    in retry summed over its rows, once both say the same."""
    expected = {"retry_in": 0, "0": 0, "1": TWICE, "retry_out": ONCE}
    tiers: dict[str, Any] = {}
    in_retry = -1
    for _ in range(120):
        overview = (await http.get("/api/overview")).json()
        tiers = overview["destinations"][dest]["tiers"]
        accounting = (await http.get("/api/accounting", params={"dest": dest})).json()
        in_retry = sum(row["in_retry"] for row in accounting.get("rows", []))
        if tiers.get("waiting_per_stage") == expected and in_retry == TWICE + ONCE:
            return tiers, in_retry
        await asyncio.sleep(0.5)
    raise AssertionError(
        f"the retrier says {tiers.get('waiting_per_stage')}, the auditor {in_retry}"
    )


async def test_the_dashboards_waiting_total_is_the_auditors_in_retry(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """20 events handed off twice wait out tier 1 (10 min) and 10 handed off once wait in
    NAME.retry_out (the connector stopped): the dashboard shows 20 and 10 by stage, 30 in all,
    the auditor's `in retry` for the destination."""
    audit_topic = f"{unique}.audit"
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    dest = audited_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        retry_tiers_s=[4, 600],
        local_retry_attempts=1,
        breaker_failures=1000,
        internal_topic_partitions=2,
    )
    destination.set_faults(1.0, [Reply(503)])
    auditor_port = free_port()
    auditor = Auditor(
        [dest],
        kafka_settings,
        archive_dir=tmp_path / "archive",
        roll_s=0.5,
        topic=audit_topic,
        group_id=f"{unique}.auditor",
        metrics_port=auditor_port,
    )
    retrier = Retrier(
        [dest],
        kafka_settings,
        metrics_port=0,
        group_id=f"{unique}.retrier",
        audit_topic=audit_topic,
        dashboard=DashboardOptions(auditor_url=f"http://127.0.0.1:{auditor_port}"),
    )
    async with running(auditor, retrier):
        await produce_events(kafka_settings, unique, events(TWICE, prefix="twice"))
        async with running(Connector(dest, kafka_settings, audit_topic=audit_topic)):
            await _handed_off(kafka_settings, dest.retry_in_topic, attempt=2, count=TWICE)
            await produce_events(kafka_settings, unique, events(ONCE, prefix="once"))
            await _handed_off(kafka_settings, dest.retry_in_topic, attempt=1, count=TWICE + ONCE)
        # stopped within tier 0's 4 s: the 10 are re-offered to NAME.retry_out and wait there
        assert retrier.ops is not None
        assert await until(lambda: retrier.ops is not None and retrier.ops.ready, 30)
        base = f"http://127.0.0.1:{retrier.ops.port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            tiers, in_retry = await _agreed(http, dest.name)
    assert tiers["waiting_total"] == in_retry == TWICE + ONCE
    assert tiers["waiting_per_tier"] == {"0": 0, "1": TWICE}
