"""A source topic deleted and created again under a running connector: the connector notices
that its partition started over and delivers the new topic's events from its beginning."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import pytest
import structlog

from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import produce_events
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.auditor.support import recreate_topic
from tests.helpers import events, make_destination, until

pytestmark = [pytest.mark.integration]


async def test_a_running_connector_delivers_a_recreated_topic_from_its_beginning(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
) -> None:
    """10 events delivered; the topic deleted and created again with 5 new events at offsets
    0-4, below the 10 read: the same connector delivers the 5, says so in one warning line and
    shows the partition in `/status`."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    dest = make_destination(
        catalog_dir, unique, destination.url, unique, internal_topic_partitions=1
    )
    await produce_events(kafka_settings, unique, events(10, prefix="a"))
    connector = Connector(dest, kafka_settings, metrics_port=0, audit_topic=f"{unique}.audit")
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(connector.run())
        try:
            assert await until(lambda: len(destination.delivered_ids()) == 10, timeout_s=60)
            await recreate_topic(kafka_settings, unique)
            await produce_events(kafka_settings, unique, events(5, prefix="b"))
            assert await until(lambda: len(destination.delivered_ids()) == 15, timeout_s=60)
            assert connector.ops is not None
            async with httpx.AsyncClient(timeout=10) as client:
                answer = await client.get(f"http://127.0.0.1:{connector.ops.port}/status")
            status = answer.json()
        finally:
            connector.request_stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
    assert sorted(destination.delivered_ids()[10:]) == [f"b-{i}" for i in range(5)]
    (line,) = [e for e in logs if e["event"] == "partition_started_over"]
    assert (line["topic"], line["partition"], line["read_up_to"]) == (unique, 0, 10)
    (seen,) = status["partitions_started_over"]
    assert (seen["partition"], seen["times"], seen["read_up_to"]) == (f"{unique}/0", 1, 10)
