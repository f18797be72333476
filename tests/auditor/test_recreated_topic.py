"""A source topic deleted and created again: its offsets start over, its events are new events."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from auditor.daemon import Auditor
from config.destination import Destination
from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import move_committed, produce_events
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.auditor.support import (
    audited_destination,
    minute_start,
    now_ms,
    recreate_topic,
    rows_of,
    running,
)
from tests.helpers import events, until

pytestmark = [pytest.mark.integration]


def _past(batch: list[dict[str, Any]], at_ms: int) -> list[dict[str, Any]]:
    return [{**event, "event_time": at_ms + i} for i, event in enumerate(batch)]


async def _deliver(dest: Destination, settings: KafkaSettings, audit_topic: str) -> None:
    run = Connector(dest, settings, until_idle_s=1.5, audit_topic=audit_topic)
    await asyncio.wait_for(run.run(), 60)


def _totals(auditor: Auditor, dest: str) -> dict[str, int]:
    rows = rows_of(auditor, dest)
    return {k: sum(r[k] for r in rows) for k in ("entered", "delivered", "duplicates")}


async def test_a_topic_recreated_between_two_auditor_runs_counts_new_events_as_new(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """30 events delivered and audited; the topic deleted and created again, 20 more delivered
    from offset 0: the next auditor run (same archive, same snapshot) counts 50 entered and 50
    delivered, no duplicate, and says so in one log line and in `/status`."""
    audit_topic, archive = f"{unique}.audit", tmp_path / "archive"
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    dest = audited_destination(catalog_dir, unique, destination.url, unique)
    old_minute = minute_start(now_ms()) - 180_000
    await produce_events(kafka_settings, unique, _past(events(30, prefix="a"), old_minute))
    await _deliver(dest, kafka_settings, audit_topic)

    def auditor() -> Auditor:
        return Auditor(
            [dest],
            kafka_settings,
            archive_dir=archive,
            roll_s=0.5,
            topic=audit_topic,
            group_id=f"{unique}.auditor",
            metrics_port=0,
        )

    first = auditor()
    async with running(first):
        assert await until(lambda: first.accounts is not None, timeout_s=30)
        assert first.accounts is not None
        assert await until(lambda: _totals(first, unique)["delivered"] == 30, timeout_s=60)

    await recreate_topic(kafka_settings, unique)
    await produce_events(kafka_settings, unique, _past(events(20, prefix="b"), old_minute))
    await move_committed(kafka_settings, dest.connector_group, unique, 0, 0)
    await _deliver(dest, kafka_settings, audit_topic)
    assert len(destination.delivered_ids()) == 50

    second = auditor()
    with structlog.testing.capture_logs() as logs:
        async with running(second):
            assert await until(lambda: second.accounts is not None, timeout_s=30)
            assert second.accounts is not None
            assert await until(lambda: _totals(second, unique)["entered"] >= 50, timeout_s=60)
            assert await until(lambda: _totals(second, unique)["delivered"] >= 50, timeout_s=60)
            totals = _totals(second, unique)
            assert second.ops is not None
            async with httpx.AsyncClient(timeout=10) as client:
                status = (await client.get(f"http://127.0.0.1:{second.ops.port}/status")).json()
    assert totals == {"entered": 50, "delivered": 50, "duplicates": 0}
    noticed = [e for e in logs if e["event"] == "source_partition_recreated"]
    assert [(e["topic"], e["partition"], e["epoch"]) for e in noticed] == [(unique, 0, 1)]
    recreated = status["recreated_partitions"]
    assert [(r["topic"], r["partition"], r["epoch"]) for r in recreated] == [(unique, 0, 1)]


async def test_a_topic_recreated_while_the_auditor_runs_counts_new_events_as_new(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """30 events delivered and audited; while the same auditor and connector run, the topic is
    deleted and created again and 20 more are delivered from offset 0: the auditor counts 50
    entered and 50 delivered, no duplicate, says so in one log line of its worker and one of
    its accounts, and shows it in `/status`."""
    audit_topic = f"{unique}.audit"
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    dest = audited_destination(catalog_dir, unique, destination.url, unique)
    old_minute = minute_start(now_ms()) - 180_000
    await produce_events(kafka_settings, unique, _past(events(30, prefix="a"), old_minute))
    connector = Connector(dest, kafka_settings, audit_topic=audit_topic)
    auditor = Auditor(
        [dest],
        kafka_settings,
        archive_dir=tmp_path / "archive",
        roll_s=0.5,
        topic=audit_topic,
        group_id=f"{unique}.auditor",
        metrics_port=0,
    )
    with structlog.testing.capture_logs() as logs:
        async with running(auditor), running(connector):
            assert await until(lambda: auditor.accounts is not None, timeout_s=30)
            assert auditor.accounts is not None
            assert await until(lambda: _totals(auditor, unique)["delivered"] == 30, timeout_s=60)
            await recreate_topic(kafka_settings, unique)
            await produce_events(kafka_settings, unique, _past(events(20, prefix="b"), old_minute))
            assert await until(lambda: len(destination.delivered_ids()) == 50, timeout_s=60)
            assert await until(lambda: _totals(auditor, unique)["entered"] >= 50, timeout_s=60)
            assert await until(lambda: _totals(auditor, unique)["delivered"] >= 50, timeout_s=60)
            totals = _totals(auditor, unique)
            assert auditor.ops is not None
            async with httpx.AsyncClient(timeout=10) as client:
                status = (await client.get(f"http://127.0.0.1:{auditor.ops.port}/status")).json()
    assert totals == {"entered": 50, "delivered": 50, "duplicates": 0}
    started_over = [
        (e.get("component", "connector"), e["topic"], e["partition"], e["read_up_to"])
        for e in logs
        if e["event"] == "partition_started_over"
    ]
    assert sorted(started_over) == [("auditor", unique, 0, 30), ("connector", unique, 0, 30)]
    noticed = [e for e in logs if e["event"] == "source_partition_recreated"]
    assert [(e["topic"], e["partition"], e["epoch"]) for e in noticed] == [(unique, 0, 1)]
    recreated = status["recreated_partitions"]
    assert [(r["topic"], r["partition"], r["epoch"]) for r in recreated] == [(unique, 0, 1)]
    (seen,) = status["partitions_started_over"]
    assert (seen["partition"], seen["times"], seen["read_up_to"]) == (f"{unique}/0", 1, 30)
