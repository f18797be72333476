"""The auditor against a real broker, a real connector and a real HTTP destination, in this process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import structlog
from prometheus_client import REGISTRY

from auditor.daemon import Auditor
from auditor.metrics import DOWN_REASONS
from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import move_committed, produce_events
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.auditor.support import (
    audited_destination,
    now_ms,
    rows_of,
    running,
    sample,
    settled,
)
from tests.helpers import events, until


async def test_a_deliberate_gap_is_reported_as_exactly_its_missing_ids(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """Offsets moved past K records: the tables name exactly those ids, in their minutes, and
    alarm; `/status` shows the destination's last 2xx and its requests, none failed."""
    started_ms = now_ms()
    audit_topic = f"{unique}.audit"
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    dest = audited_destination(catalog_dir, unique, destination.url, unique)
    first = events(300, prefix="a")
    await produce_events(kafka_settings, unique, first)
    run = Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit_topic)
    await asyncio.wait_for(run.run(), 60)
    second = events(100, prefix="b")
    await produce_events(kafka_settings, unique, second)
    await move_committed(kafka_settings, dest.connector_group, unique, 0, 307)  # skip 300..306
    run = Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit_topic)
    await asyncio.wait_for(run.run(), 60)
    skipped = sorted(e["id"] for e in second[:7])
    assert sorted(destination.delivered_ids()) == sorted(e["id"] for e in first + second[7:])

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
        async with running(auditor):
            await settled(auditor, unique, 400)
            # a roll writes the rows the missing ids are resolved from, then names them
            assert await until(
                lambda: sum(len(r["missing_ids"]) for r in rows_of(auditor, unique)) >= 7,
                timeout_s=60,
            ), "the auditor never named the missing ids"
            # a minute with loss is counted down once it is final, which may come after the roll
            assert await until(
                lambda: all(r["final"] for r in rows_of(auditor, unique) if r["missing"]),
                timeout_s=60,
            ), "the minutes with loss never became final"
            # the lead counts a final minute's availability when it next writes the tables, once,
            # for the reason it first went down for: `lag` when the second run's deliveries fell
            # after the minute ended and its settle_s (late), before the skipped ids were lost
            # (a run that starts in a minute's last seconds delivers its first events after
            # that minute's settle_s: that minute is down too, for lag)
            assert await until(
                lambda: _down_minutes(unique) >= len(_down_rows(rows_of(auditor, unique))),
                timeout_s=60,
            ), "the down minutes were never counted"
            rows = rows_of(auditor, unique)
            assert auditor.ops is not None
            async with httpx.AsyncClient(timeout=10) as client:
                status = await client.get(f"http://127.0.0.1:{auditor.ops.port}/status")
    health = status.json()["dests"][unique]["health"]
    assert started_ms <= health["last_delivered_ms"] <= now_ms()
    assert health["window_s"] == 300
    assert health["batches"] > 0
    assert health["events"] > 0
    assert (health["failed_events"], health["failed_event_share"]) == (0, 0.0)
    assert (health["failed_batches"], health["bisection_requests"]) == (0, 0)
    assert sum(r["entered"] for r in rows) == 400
    assert sum(r["delivered"] for r in rows) == 393
    assert sum(r["missing"] for r in rows) == 7
    named = sorted(i for r in rows for i in r["missing_ids"])
    assert named == skipped
    minutes_with_loss = {r["minute"] for r in rows if r["missing"]}
    assert all(r["down_reason"] == "loss" for r in rows if r["minute"] in minutes_with_loss)
    alarms = [e for e in logs if e["event"] == "loss_alarm"]
    assert sum(e["missing"] for e in alarms) == 7
    assert (REGISTRY.get_sample_value("hifi_auditor_loss_alarms_total", {"dest": unique}) or 0) >= 1
    # the availability burn-rate alerts divide these two counters (deploy/prometheus)
    assert minutes_with_loss <= _down_rows(rows)
    assert _down_minutes(unique) == len(_down_rows(rows))
    final = REGISTRY.get_sample_value("hifi_auditor_final_minutes_total", {"dest": unique}) or 0
    assert final >= sum(1 for r in rows if r["final"])


def _down_rows(rows: list[dict[str, Any]]) -> set[str]:
    """The final minutes judged down, for any reason."""
    return {r["minute"] for r in rows if r["final"] and r["down_reason"] is not None}


def _down_minutes(dest: str) -> float:
    """The down minutes of `dest` over both reasons: the availability's numerator."""
    name = "hifi_auditor_down_minutes_total"
    return sum(sample(name, {"dest": dest, "reason": reason}) for reason in DOWN_REASONS)
