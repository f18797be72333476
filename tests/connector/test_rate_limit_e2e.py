"""Rate limits against a real broker and loopback destination: events/s, requests/s, one tenant limited."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY

from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import dead_letters, produce_events, read_topic
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache.redis_hash import RedisSettings
from tests.helpers import events, make_destination, ops_status, running
from tests.tenants.support import TENANT_FIELD, entry, write_tenant_destination

pytestmark = [pytest.mark.integration]

# generous: the measured rate after the first second's burst is at most this times the limit
AT_MOST = 1.3


def _rate_after_burst(times_ms: list[int], limit_per_s: float) -> float:
    """Items a second after the first second's burst: what came after the first `limit_per_s`
    items, over the time from the first item to the last."""
    times_ms = sorted(times_ms)
    span_s = (times_ms[-1] - times_ms[0]) / 1000
    return (len(times_ms) - limit_per_s) / span_s


async def test_events_per_second_hold_over_three_seconds(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """At 200 events a second, 800 events arrive at about that rate after the first second's
    burst (at most 1.3 x), every one delivered and none dead-lettered or handed off; the
    waits are counted and /status shows the limit."""
    sent = events(800, prefix=unique)
    await produce_events(kafka_settings, unique, sent)
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        max_batch_records=20,
        max_in_flight=4,
        rate_limit_events_per_s=200.0,
    )
    connector = Connector(dest, kafka_settings, metrics_port=0)
    async with running(connector):
        assert await destination.wait_for_ids([e["id"] for e in sent], 60)
        limits = (await ops_status(connector.ops))["rate_limits"]
    times_ms = [delivery.received_ms for delivery in destination.deliveries()]
    rate = _rate_after_burst(times_ms, 200.0)
    assert 200.0 * 0.5 <= rate <= 200.0 * AT_MOST, rate
    assert await dead_letters(kafka_settings, unique) == {}
    assert await read_topic(kafka_settings, dest.retry_in_topic) == []
    assert limits["events_per_s"] == 200.0
    assert limits["wait_seconds_total"] > 1.0


async def test_requests_per_second_hold(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """At 20 requests a second, 60 requests of 10 events arrive at about that rate after the
    first second's burst (at most 1.3 x), and every event is delivered."""
    sent = events(600, prefix=unique)
    await produce_events(kafka_settings, unique, sent)
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        max_batch_records=10,
        max_in_flight=4,
        rate_limit_requests_per_s=20.0,
    )
    connector = Connector(dest, kafka_settings, metrics_port=0)
    async with running(connector):
        assert await destination.wait_for_ids([e["id"] for e in sent], 60)
    times_ms = [request.received_ms for request in destination.requests]
    rate = _rate_after_burst(times_ms, 20.0)
    assert 20.0 * 0.5 <= rate <= 20.0 * AT_MOST, rate
    assert await dead_letters(kafka_settings, unique) == {}


async def test_a_limited_tenant_waits_alone(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """One tenant limited to 50 events a second, another not: the limited one's events arrive
    at about its rate after its burst, while the other's all arrive well before (its rate is
    not held by the limited tenant's waits)."""
    url = destination.url.replace("/v1/events", "/v1/{tenant}/events")
    extra = "max_batch_records = 10\nmax_in_flight = 2\n"
    dest = write_tenant_destination(catalog_dir, unique, url, unique, extra=extra, headers="")
    client = redis.Redis.from_url(redis_url)
    try:
        client.hset(
            f"hifi:tenants:{unique}",
            mapping={"slow": entry(rate_limit_events_per_s=50), "fast": entry()},
        )
    finally:
        client.close()
    slow = [{**e, TENANT_FIELD: "slow"} for e in events(150, f"{unique}-slow")]
    fast = [{**e, TENANT_FIELD: "fast"} for e in events(600, f"{unique}-fast")]
    # the limited tenant's backlog first: its full batches are first in line
    mixed = slow + fast
    connector = Connector(
        dest, kafka_settings, redis=RedisSettings(redis_url), state_dir=tmp_path, metrics_port=0
    )
    async with running(connector):
        await produce_events(kafka_settings, unique, mixed)
        assert await destination.wait_for_ids([e["id"] for e in slow + fast], 60)
    by_id = {delivery.id: delivery.received_ms for delivery in destination.deliveries()}
    slow_ms = [by_id[e["id"]] for e in slow]
    fast_ms = [by_id[e["id"]] for e in fast]
    slow_rate = _rate_after_burst(slow_ms, 50.0)
    assert slow_rate <= 50.0 * AT_MOST, slow_rate
    # the other tenant's 600 events all arrive well before the 150 at 50/s
    assert max(fast_ms) <= max(slow_ms) - 1000, (max(slow_ms) - max(fast_ms)) / 1000
    assert await dead_letters(kafka_settings, unique) == {}
    routes = REGISTRY.get_sample_value("hifi_connector_rate_limited_routes", {"dest": unique})
    assert routes == 1.0
