"""The circuit breaker against a real broker and loopback destination: 401s, a 404, an outage, a tenant."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY

from connector.daemon import Connector
from devstack.destination import Reply, TestDestination
from devstack.kafka_tools import committed_offsets, dead_letters, produce_events, read_topic
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache.redis_hash import RedisSettings
from tests.helpers import events, make_destination, ops_status, running, until
from tests.retrier.support import id_of
from tests.tenants.support import TENANT_FIELD, entry, write_tenant_destination

pytestmark = [pytest.mark.integration]

BATCH = 20
IN_FLIGHT = 4
FAILURES = 3
# what can meet a fault before the breaker opens: the batches that count toward it, and those
# in flight beside the last of them
AT_MOST_BATCHES = FAILURES + IN_FLIGHT - 1


def _state(dest: str) -> float | None:
    return REGISTRY.get_sample_value("hifi_connector_breaker_state", {"dest": dest})


def _keys(**overrides: object) -> dict[str, object]:
    return {
        "max_batch_records": BATCH,
        "max_in_flight": IN_FLIGHT,
        "breaker_failures": FAILURES,
        "breaker_max_open_s": 2.0,
        "commit_interval_s": 0.2,
        **overrides,
    }


def _probes(destination: TestDestination) -> int:
    """Probe requests refused so far: one event each, answered 401."""
    return sum(1 for r in destination.requests if r.status == 401 and len(r.ids) == 1)


async def test_401s_then_2xx_dead_letter_the_batches_in_flight_and_the_probes_only(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A refused token for two probes: the DLQ holds the batches that met it before the breaker opened
    plus one event per probe (not the 1,000 of today); once it is accepted again every other
    event is delivered; nothing is lost."""
    sent = events(1000, prefix=unique)
    await produce_events(kafka_settings, unique, sent)
    dest = make_destination(catalog_dir, unique, destination.url, unique, **_keys())
    destination.set_faults(1.0, [Reply(401)])
    connector = Connector(dest, kafka_settings, metrics_port=0)
    async with running(connector):
        assert await until(lambda: _state(unique) == 2, 30)
        status = await ops_status(connector.ops)
        assert status["breaker"]["destination"]["state"] in ("open", "half_open")
        assert status["intake"]["paused"] is True
        # the token stays refused for two probes (after 1 s, then 2 s)
        assert await until(lambda: _probes(destination) >= 2, 30)
        destination.reset_script()
        dead = await dead_letters(kafka_settings, unique)
        rest = [e["id"] for e in sent if e["id"] not in dead]
        assert await destination.wait_for_ids(rest, 60)
    dead = await dead_letters(kafka_settings, unique)
    probes = _probes(destination)
    assert 2 <= probes <= 4  # two while refused, and at most two more in flight as it ended
    assert len(dead) <= AT_MOST_BATCHES * BATCH + probes
    assert set(dead.values()) == {"http_4xx"}
    assert set(destination.delivered_ids()) | set(dead) == {e["id"] for e in sent}
    assert _state(unique) == 0


async def test_a_wrong_path_costs_a_few_requests_and_leaves_the_rest_in_kafka(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A 404 on every request: no bisection, the breaker opens and stays open, intake pauses;
    the events not yet sent stay in Kafka (uncommitted) instead of the DLQ."""
    sent = events(1000, prefix=unique)
    await produce_events(kafka_settings, unique, sent)
    dest = make_destination(catalog_dir, unique, destination.url, unique, **_keys())
    destination.set_faults(1.0, [Reply(404)])
    connector = Connector(dest, kafka_settings, metrics_port=0)
    async with running(connector):
        assert await until(lambda: _state(unique) == 2, 30)
        await asyncio.sleep(2.5)  # the behaviour: the breaker stays open during these 2.5 s
        assert _state(unique) in (1, 2)
    dead = await dead_letters(kafka_settings, unique)
    assert 0 < len(dead) <= AT_MOST_BATCHES * BATCH + 3
    assert destination.request_count <= AT_MOST_BATCHES + 3
    committed = await committed_offsets(kafka_settings, dest.connector_group, unique)
    assert sum(offset or 0 for offset in committed.values()) == len(dead)


async def test_an_outage_hands_off_at_most_a_batch_per_slot(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Connections refused for 4 s: at most one batch per in-flight slot is handed to the
    retrier (not every event); once the destination is back the rest are delivered."""
    sent = events(1000, prefix=unique)
    await produce_events(kafka_settings, unique, sent)
    dest = make_destination(catalog_dir, unique, destination.url, unique, **_keys())
    await destination.set_down(True)
    connector = Connector(dest, kafka_settings, metrics_port=0)
    async with running(connector):
        assert await until(lambda: _state(unique) == 2, 30)
        await asyncio.sleep(4.0)  # the behaviour: an outage of 4 s
        await destination.set_down(False)
        handed = {id_of(r) for r in await read_topic(kafka_settings, dest.retry_in_topic)}
        rest = [e["id"] for e in sent if e["id"] not in handed]
        assert await destination.wait_for_ids(rest, 60)
    handed = {id_of(r) for r in await read_topic(kafka_settings, dest.retry_in_topic)}
    assert 0 < len(handed) <= IN_FLIGHT * BATCH + 3  # and a probe event per half-open
    assert set(destination.delivered_ids()) | handed == {e["id"] for e in sent}


async def test_one_tenant_of_ten_failing_opens_its_route_alone(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """One tenant's token refused: its route's breaker opens and its events go to the retrier
    without a request, while the nine others are all delivered."""
    tenants = [f"t{i}" for i in range(10)]
    url = destination.url.replace("/v1/events", "/v1/{tenant}/events")
    extra = (
        "max_batch_records = 10\nmax_in_flight = 4\nbreaker_failures = 2\n"
        "breaker_max_open_s = 60.0\n"
    )
    dest = write_tenant_destination(catalog_dir, unique, url, unique, extra=extra, headers="")
    client = redis.Redis.from_url(redis_url)
    try:
        client.hset(f"hifi:tenants:{unique}", mapping={t: entry() for t in tenants})
    finally:
        client.close()
    sent = [{**e, TENANT_FIELD: tenants[i % 10]} for i, e in enumerate(events(600, unique))]
    failing = [e["id"] for e in sent if e[TENANT_FIELD] == "t3"]
    destination.reject_ids(failing, 401)
    connector = Connector(
        dest, kafka_settings, redis=RedisSettings(redis_url), state_dir=tmp_path, metrics_port=0
    )
    async with running(connector):
        await produce_events(kafka_settings, unique, sent)
        others = [e["id"] for e in sent if e[TENANT_FIELD] != "t3"]
        assert await destination.wait_for_ids(others, 60)
        open_routes = {"dest": unique}
        assert await until(
            lambda: (
                REGISTRY.get_sample_value("hifi_connector_breaker_open_routes", open_routes) == 1
            ),
            30,
        )
        breakers = (await ops_status(connector.ops))["breaker"]
        assert list(breakers["routes"]) == ["t3"]
        assert _state(unique) == 0
        handed = {id_of(r) for r in await read_topic(kafka_settings, dest.retry_in_topic)}
        dead = await dead_letters(kafka_settings, unique)
    tried = sum(1 for r in destination.requests if set(r.ids) & set(failing))
    assert tried <= 2 + 4 - 1 + 1  # the failures that opened it, those in flight, a probe
    assert len(dead) <= tried * 10
    assert set(dead) | handed <= set(failing)
    assert len(handed) > 0
