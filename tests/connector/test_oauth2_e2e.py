"""The connector against a real broker, a token server whose tokens die every 5 s (announced as
living 20 s, so only the destination's 401 says so) and that refuses one request, and a
destination that checks each bearer token: everything delivered, nothing lost or dead-lettered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from config.catalog import Catalog
from connector.daemon import Connector
from devstack.kafka_tools import produce_events, read_topic
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.connector.test_oauth2_bearer import write_auth_destination
from tests.helpers import events
from tests.hifi.oauth2_server import OAuth2Server

pytestmark = [pytest.mark.integration]
RUN_S, EVENTS_PER_S = 15, 40


async def test_delivers_for_15_s_through_expiring_tokens_and_one_refusal(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """Tokens expire every 5 s and the token server refuses once: every event is delivered once,
    nothing is handed off or dead-lettered, and the refreshes after 401s are counted (one per
    expiry, not one per request in flight: 8 concurrent 401s share one fetch)."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=2)
    async with OAuth2Server(lifetime_s=5.0, declared_expires_in=20.0) as server:
        write_auth_destination(
            catalog_dir,
            unique,
            server.events_url,
            server.token_url,
            topic=unique,
            max_batch_records=20,
            local_retry_attempts=3,
            local_retry_max_backoff_s=0.05,
            commit_interval_s=0.2,
            internal_topic_partitions=2,
        )
        dest = Catalog(catalog_dir, {"IDP_SECRET": server.client_secret}).load(unique)
        connector = Connector(dest, kafka_settings, until_idle_s=2.0)
        running = asyncio.create_task(connector.run())
        sent = []
        for second in range(RUN_S):
            if second == 7:
                server.refuse(400)  # the fetch after the second expiry is refused once
            batch = events(EVENTS_PER_S, prefix=unique, start=second * EVENTS_PER_S)
            await produce_events(kafka_settings, unique, batch)
            sent += batch
            await asyncio.sleep(1.0)  # the behaviour: a batch a second, across token expiries
        await asyncio.wait_for(running, 60)
    assert sorted(server.delivered_ids) == sorted(event["id"] for event in sent)
    assert await read_topic(kafka_settings, dest.dlq_topic) == []
    assert await read_topic(kafka_settings, dest.retry_in_topic) == []
    statuses = [request.status for request in server.token_requests]
    assert statuses.count(400) == 1
    refreshes = REGISTRY.get_sample_value(
        "hifi_connector_auth_refreshes_total", {"dest": unique, "reason": "unauthorized"}
    )
    assert server.unauthorized >= 2
    # tokens die at about 5 s and 10 s (and 15 s): one refresh each, one more for the refusal
    assert refreshes == statuses.count(200) - 1
    assert 2 <= statuses.count(200) - 1 <= 4
