"""Tenant lookups end to end: a real broker and destination, a private redis-server stopped, killed, restarted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
from prometheus_client import REGISTRY

from config.destination import Destination
from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import produce_events
from devstack.redis import RedisServer
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache.redis_hash import RedisSettings
from retrier.daemon import Retrier
from tests.helpers import read_facts, running, until
from tests.retrier.support import collect, create_topics, headers_of, id_of
from tests.tenants.support import TENANT_FIELD, entry, write_tenant_destination

pytestmark = [pytest.mark.integration]

KEYS = {"acme": "acme-key-0123456789", "globex": "globex-key-9876543210"}
FAST = "refresh_after_s = 0.5\nbulk_refresh_s = 1\n"


def _template(destination: TestDestination) -> str:
    return destination.url.replace("/v1/events", "/v1/{tenant}/events")


def push(server: RedisServer, dest: str, **entries: dict[str, Any]) -> None:
    """Write entries to the destination's hash, as hifi-tenants does."""
    client = redis.Redis.from_url(server.url)
    try:
        client.hset(f"hifi:tenants:{dest}", mapping={t: entry(**e) for t, e in entries.items()})
    finally:
        client.close()


def keyed(**tenants: str) -> dict[str, dict[str, Any]]:
    return {tenant: {"values": {"api_key": key}} for tenant, key in tenants.items()}


def tenant_events(prefix: str, tenants: list[str], **fields: Any) -> list[dict[str, Any]]:
    """Events as a producer writes them, the i-th of tenant tenants[i]."""
    now_ms = int(time.time() * 1000)
    return [
        {"id": f"{prefix}-{i}", "event_time": now_ms, TENANT_FIELD: tenant, **fields}
        for i, tenant in enumerate(tenants)
    ]


def connector_for(
    dest: Destination, settings: KafkaSettings, server: RedisServer, state: Path, **options: Any
) -> Connector:
    return Connector(dest, settings, redis=RedisSettings(server.url), state_dir=state, **options)


def metric(name: str, dest: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, {"dest": dest, "cache": "tenants", **labels}) or 0.0


async def readyz(connector: Connector) -> tuple[int, str]:
    assert connector.ops is not None
    assert await until(lambda: connector.ops is not None and connector.ops.port != 0, 30)
    async with httpx.AsyncClient(timeout=10) as client:
        found = await client.get(f"http://127.0.0.1:{connector.ops.port}/readyz")
    return found.status_code, found.text


async def until_ready(connector: Connector) -> None:
    """Wait until the connector's /readyz answers 200."""

    async def ready() -> bool:
        return (await readyz(connector))[0] == 200

    await eventually(ready)


async def eventually(check: Callable[[], Any], timeout_s: float = 60) -> None:
    """Wait for an async condition (a readiness, a metric), polling."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def test_not_ready_until_loaded_then_each_tenant_its_url_and_headers(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """With Redis down and no snapshot, /readyz is 503 and says why; once Redis holds the
    entries the connector is ready, and every request carries one tenant's events to its url
    with its header."""
    dest = write_tenant_destination(
        catalog_dir, unique, _template(destination), unique, lookups=FAST
    )
    redis_server.stop()
    connector = connector_for(dest, kafka_settings, redis_server, tmp_path, metrics_port=0)
    async with running(connector):
        status, text = await readyz(connector)
        assert status == 503
        assert (
            f"tenants: not loaded yet: hash hifi:tenants:{unique} at {redis_server.url} failing"
            in text
        )
        assert "no snapshot at" in text
        redis_server.start()
        push(redis_server, unique, **keyed(**KEYS))
        await until_ready(connector)
        sent = tenant_events("e", ["acme", "globex", "acme", "globex", "acme"] * 6)
        await produce_events(kafka_settings, unique, sent)
        assert await destination.wait_for_ids([e["id"] for e in sent], 60)
    by_tenant = {e["id"]: e[TENANT_FIELD] for e in sent}
    for request in destination.requests:
        (tenant,) = {by_tenant[event_id] for event_id in request.ids}  # one tenant per request
        assert request.path == f"/v1/{tenant}/events"
        assert request.headers["x-api-key"] == KEYS[tenant]
        assert request.headers["x-tenant"] == tenant
    assert metric("hifi_lookup_entries", unique) == 2


async def test_a_restart_while_redis_is_down_is_ready_from_the_snapshot(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """A connector that loaded its entries wrote a snapshot; a new one started while Redis is
    down is ready from it, says so with its age, and delivers with the entries it holds."""
    dest = write_tenant_destination(
        catalog_dir, unique, _template(destination), unique, lookups=FAST
    )
    push(redis_server, unique, **keyed(**KEYS))
    first = connector_for(dest, kafka_settings, redis_server, tmp_path)
    async with running(first):
        assert await until(lambda: first.routes is not None, 30)
        assert first.routes is not None
        await asyncio.wait_for(first.routes.loaded.wait(), 30)
    assert (tmp_path / "lookups" / f"{unique}.tenants.json").is_file()
    redis_server.stop(kill=True)
    second = connector_for(dest, kafka_settings, redis_server, tmp_path, metrics_port=0)
    async with running(second):
        await until_ready(second)
        text = (await readyz(second))[1]
        assert "tenants: 2 entries from the snapshot" in text
        assert " s ago; " in text
        assert "failing" in text
        sent = tenant_events("s", ["acme", "globex"] * 5)
        await produce_events(kafka_settings, unique, sent)
        assert await destination.wait_for_ids([e["id"] for e in sent], 60)
    assert {r.headers["x-api-key"] for r in destination.requests} == set(KEYS.values())


async def test_changes_reach_the_connector_and_redis_going_away_loses_nothing(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """An entry changed in Redis reaches the running connector within its refresh interval;
    Redis killed mid-run: every event is still delivered with the cached entry and the
    stale-served metric rises; Redis restarted (empty, then filled again): refreshes resume."""
    dest = write_tenant_destination(
        catalog_dir, unique, _template(destination), unique, lookups=FAST
    )
    push(redis_server, unique, **keyed(acme="first-key-000000"))
    connector = connector_for(dest, kafka_settings, redis_server, tmp_path)
    produced: list[str] = []

    async def deliver_until(key: str, prefix: str) -> None:
        """Produce a few events at a time until one request carries `key` (each is delivered)."""
        for round_ in range(100):
            sent = tenant_events(f"{prefix}{round_}", ["acme"] * 3)
            produced.extend(e["id"] for e in sent)
            await produce_events(kafka_settings, unique, sent)
            assert await destination.wait_for_ids([e["id"] for e in sent], 60)
            if any(r.headers["x-api-key"] == key for r in destination.requests):
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"no request with the key {key!r}")

    async with running(connector):
        await deliver_until("first-key-000000", "a")
        push(redis_server, unique, **keyed(acme="second-key-11111"))
        await deliver_until("second-key-11111", "b")

        redis_server.stop(kill=True)
        stale_before = metric("hifi_lookup_stale_served_total", unique)
        await eventually(
            _async(lambda: metric("hifi_lookup_refresh_failures_total", unique, kind="full") > 0)
        )
        mark = len(destination.requests)
        routes = connector.routes
        assert routes is not None
        assert len(routes) == 1  # one tenant: the oldest value is the one served
        # past refresh_after_s (0.5) since it was loaded: what is served now is stale
        assert await until(lambda: (routes.reading().oldest_value_age_s or 0) > 0.5, 30)
        sent = tenant_events("down", ["acme"] * 20)
        produced.extend(e["id"] for e in sent)
        await produce_events(kafka_settings, unique, sent)
        assert await destination.wait_for_ids([e["id"] for e in sent], 60)
        while_down = destination.requests[mark:]
        assert {r.headers["x-api-key"] for r in while_down} == {"second-key-11111"}
        assert metric("hifi_lookup_stale_served_total", unique) > stale_before
        assert connector.routes is not None
        assert connector.routes.status()["failing"] is True

        redis_server.start()
        refreshed = metric("hifi_lookup_refreshes_total", unique, kind="full")
        push(redis_server, unique, **keyed(acme="third-key-222222"))
        await eventually(
            _async(lambda: metric("hifi_lookup_refreshes_total", unique, kind="full") > refreshed)
        )
        await deliver_until("third-key-222222", "c")
        assert connector.routes.status()["failing"] is False
    assert set(produced) <= set(destination.delivered_ids())  # nothing lost


def _async(condition: Callable[[], bool]) -> Callable[[], Any]:
    async def check() -> bool:
        return condition()

    return check


async def test_unknown_tenant_goes_through_the_retrier_to_the_dlq_as_unknown_tenant(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """Events of a tenant without an entry are handed to the retrier with the cause
    unknown_tenant and dead-lettered with that reason after the last tier (and so is the
    retrier's audit fact); a tenant whose entry arrives while its events wait is delivered."""
    dest = write_tenant_destination(
        catalog_dir,
        unique,
        _template(destination),
        unique,
        lookups=FAST,
        extra="retry_tiers_s = [1, 1]\n",
    )
    await create_topics(kafka_settings, dest)
    push(redis_server, unique, **keyed(acme="acme-key-0000000"))
    nobody = tenant_events("n", ["nobody"] * 4)
    late = tenant_events("l", ["late"] * 3)
    await produce_events(kafka_settings, unique, nobody + late)
    retrier = Retrier([dest], kafka_settings, group_id=f"hifi.retrier.{unique}")
    connector = connector_for(dest, kafka_settings, redis_server, tmp_path)
    async with running(connector, retrier):
        handed = await collect(kafka_settings, dest.retry_in_topic, len(nobody + late))
        push(redis_server, unique, **keyed(late="late-key-0000000"))
        dead = await collect(kafka_settings, dest.dlq_topic, len(nobody))
        assert await destination.wait_for_ids([e["id"] for e in late], 60)
    assert {headers_of(r)["hifi-cause"] for r in handed} == {b"unknown_tenant"}
    assert sorted(id_of(r) for r in dead) == sorted(e["id"] for e in nobody)
    for record in dead:
        headers = headers_of(record)
        assert headers["hifi-reason"] == b"unknown_tenant"
        assert headers["hifi-attempt"] == b"3"  # two tiers: the third hand-off is the last
        history = orjson.loads(headers["hifi-history"])
        assert len(history) == 3
        assert all("no entry for tenant 'nobody'" in h["error"] for h in history)
    facts = [f for f in await read_facts(kafka_settings, "hifi.audit") if f.dest == unique]
    retrier_dead = {
        f.reason for f in facts if f.outcome == "dead_lettered" and f.node.startswith("retrier")
    }
    assert retrier_dead == {"unknown_tenant"}


async def test_disabled_and_filtered_tenants(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """A disabled tenant's events are dead-lettered (tenant_disabled), or filtered where its
    entry says so; a filter's dropped events end filtered in the audit trail; a projection
    sends only the fields it keeps; nothing is delivered that should not be."""
    dest = write_tenant_destination(
        catalog_dir, unique, _template(destination), unique, lookups=FAST
    )
    await create_topics(kafka_settings, dest)
    push(
        redis_server,
        unique,
        off={"enabled": False, "values": {"api_key": "k-off-000000"}},
        hush={"enabled": False, "when_disabled": "filter", "values": {"api_key": "k-hush-00000"}},
        picky={
            "values": {"api_key": "k-picky-0000"},
            "filter": {"field": "type", "in": ["play"]},
            "project": {"keep": ["type"]},
        },
    )
    off = tenant_events("off", ["off"] * 3, type="play")
    hush = tenant_events("hush", ["hush"] * 2, type="play")
    play = tenant_events("play", ["picky"] * 3, type="play", payload="dropped by the projection")
    stop = tenant_events("stop", ["picky"] * 2, type="stop")
    await produce_events(kafka_settings, unique, off + hush + play + stop)
    connector = connector_for(dest, kafka_settings, redis_server, tmp_path, metrics_port=0)
    async with running(connector):
        assert await destination.wait_for_ids([e["id"] for e in play], 60)
        dead = await collect(kafka_settings, dest.dlq_topic, len(off))
        assert connector.ops is not None
        status_url = f"http://127.0.0.1:{connector.ops.port}/status"
        async with httpx.AsyncClient(timeout=10) as client:

            async def counted() -> bool:
                page = (await client.get(status_url)).json()
                return bool(page["totals"]["filtered"] == len(hush + stop))

            await eventually(counted)
            page = (await client.get(status_url)).json()
    assert sorted(destination.delivered_ids()) == sorted(e["id"] for e in play)
    assert all(set(event) == {"id", "type"} for r in destination.requests for event in r.events)
    assert sorted(id_of(r) for r in dead) == sorted(e["id"] for e in off)
    assert {headers_of(r)["hifi-reason"] for r in dead} == {b"tenant_disabled"}
    assert page["totals"]["dead_lettered_by_reason"]["tenant_disabled"] == len(off)
    assert page["lookups"]["entries"] == 3
    facts = [f for f in await read_facts(kafka_settings, "hifi.audit") if f.dest == unique]
    filtered = sorted(str(f.id) for f in facts if f.outcome == "filtered")
    assert filtered == sorted(e["id"] for e in hush + stop)
