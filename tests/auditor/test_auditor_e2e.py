"""The auditor against a real broker, a real connector and a real HTTP destination, in this process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import structlog
from prometheus_client import REGISTRY

from auditor.daemon import Auditor
from auditor.ledger import Ledger
from config.catalog import Catalog, Destination
from connector import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import move_committed, produce_events
from hifi import kafka_admin
from hifi.kafka_settings import KafkaSettings
from tests.helpers import events, write_destination

SETTLE_S = 1.0


def audited_destination(catalog_dir: Path, name: str, url: str, topic: str, **accounting: float) -> Destination:
    """A destination with fast test settings and an [accounting] table settling in a second."""
    path = write_destination(
        catalog_dir,
        name,
        url=url,
        source_topics=[topic],
        local_retry_attempts=2,
        local_retry_max_backoff_s=0.05,
        commit_interval_s=0.2,
        shutdown_timeout_s=10.0,
        internal_topic_partitions=1,
    )
    table = {"settle_s": SETTLE_S, "retention_min": 30, "lag_sla_s": 30.0, **accounting}
    with path.open("a") as out:
        out.write("[accounting]\n")
        out.writelines(f"{key} = {value!r}\n" for key, value in table.items())
    return Catalog(catalog_dir).load(name)


@contextlib.asynccontextmanager
async def running(auditor: Auditor) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(auditor.run())
    try:
        yield task
    finally:
        auditor.request_stop()
        await asyncio.wait_for(task, 60)


async def settled(auditor: Auditor, dest: str, entered: int, timeout_s: float = 100.0) -> Ledger:
    """Wait until every minute holding events is final and `entered` events are counted."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        accounts = auditor.accounts
        if accounts is not None:
            ledger = accounts.ledgers[dest]
            buckets = list(ledger.rows())
            total = sum(ledger.tally(b).entered for b in buckets)
            if buckets and total >= entered and all(b.final for b in buckets if ledger.tally(b).entered):
                return ledger
        assert loop.time() < deadline, "the auditor did not settle its minutes in time"
        await asyncio.sleep(0.5)


async def test_a_deliberate_gap_is_reported_as_exactly_its_missing_ids(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """Offsets moved past K records: the tables name exactly those ids, in their minutes, and alarm."""
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
        [dest], kafka_settings, archive_dir=tmp_path / "archive", roll_s=0.5, topic=audit_topic,
        group_id=f"{unique}.auditor",
    )  # fmt: skip
    with structlog.testing.capture_logs() as logs:
        async with running(auditor):
            ledger = await settled(auditor, unique, 400)
            await asyncio.sleep(3)  # a roll writes the rows the missing ids are resolved from
    rows = [(ledger.tally(b), b) for b in ledger.rows()]
    assert sum(c.entered for c, _ in rows) == 400
    assert sum(c.delivered for c, _ in rows) == 393
    assert sum(c.missing for c, _ in rows) == 7
    named = sorted(i for _, b in rows for i in (b.missing_ids or []))
    assert named == skipped
    minutes_with_loss = {b.minute_ms for c, b in rows if c.missing}
    assert all(b.down_reason == "loss" for _, b in rows if b.minute_ms in minutes_with_loss)
    alarms = [e for e in logs if e["event"] == "loss_alarm"]
    assert sum(e["missing"] for e in alarms) == 7
    assert (REGISTRY.get_sample_value("hifi_auditor_loss_alarms_total", {"dest": unique}) or 0) >= 1
