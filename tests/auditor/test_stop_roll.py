"""A stopped auditor archives what it concluded: its last roll comes with the stop, not a roll interval later."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from auditor.daemon import Auditor
from devstack.kafka_tools import produce_events
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.auditor.support import (
    COUNTS,
    audited_destination,
    by_minute,
    differences,
    minute_start,
    now_ms,
    rows_of,
    run_auditor_command,
    running,
    settled,
)
from tests.helpers import events

pytestmark = [pytest.mark.integration]


async def test_a_stop_right_after_minutes_became_final_archives_them(
    kafka_settings: KafkaSettings, catalog_dir: Path, tmp_path: Path, unique: str
) -> None:
    """Minutes become final long before the next roll is due; a stop (SIGTERM's `request_stop`)
    then rolls once more: `auditor report --archive` gives the rows the live tables gave."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    dest = audited_destination(catalog_dir, unique, "http://127.0.0.1:9", unique)
    two_minutes_ago = minute_start(now_ms()) - 120_000
    old = [
        {**event, "event_time": two_minutes_ago + 1_000 + i * 100}
        for i, event in enumerate(events(40))
    ]
    await produce_events(kafka_settings, unique, old)
    archive = tmp_path / "archive"
    auditor = Auditor(
        [dest],
        kafka_settings,
        archive_dir=archive,
        roll_s=3600.0,  # no roll comes due while it runs: only the stop's
        group_id=f"{unique}.auditor",
        topic=f"{unique}.audit",
    )
    async with running(auditor):
        await settled(auditor, unique, 40)
        live = by_minute((r for r in rows_of(auditor, unique) if r["final"]), COUNTS)
    assert sum(row["entered"] for row in live.values()) == 40
    # no connector group ever committed past them: still in the topic, waiting, not missing
    assert all((row["waiting"], row["missing"]) == (40, 0) for row in live.values())

    code, out, err = await run_auditor_command(
        "report", "--dest", unique, "--archive", str(archive), "--format", "json"
    )
    assert code == 0, err
    archived = by_minute((r for r in orjson.loads(out) if r["final"]), COUNTS)
    assert differences(live, archived) == {}
