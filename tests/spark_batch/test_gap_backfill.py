"""End to end: a deliberate gap, the recount names it, a backfill of exactly it, a recount shows none."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from auditor.daemon import Auditor
from config.destination import Destination
from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import move_committed, produce_events
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from spark_batch.archive_input import Window
from spark_batch.outputs import summarize, write_outputs
from spark_batch.reconcile import Reconciled, reconcile
from tests.auditor.support import audited_destination, rows_of, running, settled
from tests.helpers import events

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]
SKIPPED = 7


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


async def _audit(
    dest: Destination,
    settings: KafkaSettings,
    archive: Path,
    audit_topic: str,
    group: str,
    *,
    entered: int,
    missing: int,
) -> None:
    """Run the auditor until every minute is final with `missing` events missing; stop it (its
    last roll archives what it concluded)."""
    auditor = Auditor(
        [dest], settings, archive_dir=archive, roll_s=0.5, topic=audit_topic, group_id=group
    )
    async with running(auditor):
        await settled(auditor, dest.name, entered)
        deadline = time.monotonic() + 60
        while sum(r["missing"] for r in rows_of(auditor, dest.name)) != missing:
            assert time.monotonic() < deadline, "the auditor never saw the backfilled deliveries"
            await asyncio.sleep(0.25)


async def _backfill(
    dest: str,
    catalog: Path,
    settings: KafkaSettings,
    missing: Path,
    state: Path,
    from_s: float,
    to_s: float,
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "connector",
        "backfill",
        "--dest",
        dest,
        "--catalog",
        str(catalog),
        "--from",
        _iso(from_s),
        "--to",
        _iso(to_s),
        "--only-missing",
        str(missing),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={
            **os.environ,
            "HIFI_KAFKA_BOOTSTRAP": settings.bootstrap,
            "HIFI_STATE_DIR": str(state),
        },
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, (out + err).decode()[-2000:]


def _recount(spark: Any, archive: Path, window: Window, dest: str) -> Reconciled:
    return reconcile(spark, str(archive), window, dests=[dest])


async def test_a_gap_is_recounted_backfilled_exactly_and_recounted_whole(
    spark: Any,
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """The connector's offsets moved past 7 records: the recount lists exactly those 7 as
    missing; `connector backfill --only-missing` re-offers exactly them; the connector delivers
    them; a second recount of the same minutes shows none missing and every event delivered."""
    started_s = time.time()
    audit_topic, archive = f"{unique}.audit", tmp_path / "archive"
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    dest = audited_destination(catalog_dir, unique, destination.url, unique)
    first, second = events(200, prefix="a"), events(100, prefix="b")
    await produce_events(kafka_settings, unique, first)
    await asyncio.wait_for(
        Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit_topic).run(), 60
    )
    await produce_events(kafka_settings, unique, second)
    await move_committed(kafka_settings, dest.connector_group, unique, 0, 200 + SKIPPED)
    await asyncio.wait_for(
        Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit_topic).run(), 60
    )
    skipped = sorted(e["id"] for e in second[:SKIPPED])
    group = f"{unique}.auditor"
    await _audit(dest, kafka_settings, archive, audit_topic, group, entered=300, missing=SKIPPED)

    window = Window(int(started_s * 1000) - 3_600_000, int(time.time() * 1000) + 3_600_000)
    before = _recount(spark, archive, window, unique)
    assert sum(row["missing"] for row in before.minutes) == SKIPPED
    assert sorted(before.missing.column("event_id").to_pylist()) == skipped
    out = tmp_path / "recount"
    write_outputs(out, before, summarize(before, window, archive=str(archive)))
    assert pq.read_table(out / "missing.parquet").num_rows == SKIPPED

    await _backfill(
        unique,
        catalog_dir,
        kafka_settings,
        out / "missing.parquet",
        tmp_path / "state",
        started_s - 60,
        time.time() + 60,
    )
    redelivered = Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit_topic)
    await asyncio.wait_for(redelivered.run(), 60)
    delivered = destination.delivered_ids()
    assert sorted(set(delivered)) == sorted(e["id"] for e in first + second)
    assert len(delivered) == 300  # exactly the missing ones again, nothing twice
    await _audit(dest, kafka_settings, archive, audit_topic, group, entered=300, missing=0)

    after = _recount(spark, archive, window, unique)
    assert [row["minute_ms"] for row in after.minutes] == [
        row["minute_ms"] for row in before.minutes
    ]
    assert sum(row["missing"] for row in after.minutes) == 0
    assert sum(row["delivered"] for row in after.minutes) == 300
    assert after.missing.num_rows == 0
