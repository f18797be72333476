"""The retrier's backlog against the real broker: what waits in NAME.retry_in, each tier and
NAME.retry_out, each from the committed offset of the group that reads it."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from devstack.kafka_tools import move_committed, read_topic
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from retrier import status
from retrier.tiers import sources_for, tier_topic
from tests.helpers import make_destination
from tests.retrier.support import create_topics, handoff, produce_all

pytestmark = [pytest.mark.integration]


async def test_retry_out_waits_from_the_connector_groups_committed_offset(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """5 hand-offs in NAME.retry_in, 7 in tier 0 and 10 re-offers in NAME.retry_out of which the
    connector's group committed 3: 5, 7 and 7 wait, 19 in all, in `/status` and the gauge."""
    dest = make_destination(catalog_dir, unique, "https://x.test/", unique, retry_tiers_s=[60])
    await create_topics(kafka_settings, dest)
    tier0 = tier_topic(dest.name, 0)
    await kafka_admin.ensure_topics(kafka_settings, [tier0], partitions=2)
    now_ms = int(time.time() * 1000)
    records = [handoff(dest, f"in-{i}", attempt=1, handoff_ms=now_ms) for i in range(5)]
    records += [
        (tier0, *handoff(dest, f"t-{i}", attempt=1, handoff_ms=now_ms)[1:]) for i in range(7)
    ]
    records += [
        (dest.retry_out_topic, *handoff(dest, f"o-{i}", attempt=1, handoff_ms=now_ms)[1:])
        for i in range(10)
    ]
    await produce_all(kafka_settings, records)
    partitions = Counter(
        r.partition for r in await read_topic(kafka_settings, dest.retry_out_topic)
    )
    fullest = max(partitions, key=lambda p: partitions[p])
    assert partitions[fullest] >= 3
    await move_committed(kafka_settings, dest.connector_group, dest.retry_out_topic, fullest, 3)

    group = f"{unique}.retrier"
    sources = sources_for([dest], [tier0])
    measured = status.measured_topics(sources, group)
    async with status.measuring(kafka_settings, group, measured, every_s=0.2) as backlog:
        async with asyncio.timeout(30):
            while backlog.stages(dest.name) != {"retry_in": 5, "0": 7, "retry_out": 7}:
                await asyncio.sleep(0.1)
        entry = status.document(
            [dest.name], backlog=backlog, heads=[], recent=status.RecentFailures(), now_ms=now_ms
        )["destinations"][dest.name]
    assert list(entry["waiting_per_stage"]) == ["retry_in", "0", "retry_out"]  # an event's path
    assert (entry["waiting_per_tier"], entry["waiting_total"]) == ({"0": 7}, 19)
    gauge = {"dest": dest.name, "tier": "retry_out"}
    assert REGISTRY.get_sample_value("hifi_retrier_waiting_events", gauge) == 7
