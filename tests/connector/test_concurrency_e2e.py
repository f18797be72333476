"""Adaptive concurrency end to end: the connector, a real broker, a destination of limited capacity."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from pathlib import Path
from typing import Any

import httpx
import orjson

from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import produce_events, read_topic
from hifi.kafka.settings import KafkaSettings
from tests.helpers import events, make_destination

CAPACITY = 4  # requests the destination serves at once; 503 beyond
SERVICE_S = 0.03
EVENTS = 2000


async def _run_sampling(
    connector: Connector, samples: list[tuple[int, int]], pages: list[dict[str, Any]]
) -> None:
    """Run the connector to its idle exit, sampling (limit, requests in flight) every 5 ms and
    its `/status` once requests flow."""

    async def sample() -> None:
        while True:
            view = connector.limiter.view()
            samples.append((view["limit"], view["attempts_in_flight"]))
            if not pages and view["rtt_mean_ms"] is not None and connector.ops is not None:
                async with httpx.AsyncClient(timeout=10) as client:
                    got = await client.get(f"http://127.0.0.1:{connector.ops.port}/status")
                pages.append(orjson.loads(got.content))
            await asyncio.sleep(0.005)  # the sampling period, not a wait for anything

    sampler = asyncio.create_task(sample())
    try:
        await asyncio.wait_for(connector.run(), 90.0)
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler


async def test_the_limit_settles_at_the_destination_capacity_nothing_lost(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Against a destination that serves 4 requests at once and answers 503 beyond, the adaptive
    limit settles around 4 (requests in flight follow it), every event is delivered, none is
    handed off or dead-lettered, and few attempts meet a 503."""
    sent = events(EVENTS)
    await produce_events(kafka_settings, unique, sent)
    destination.set_capacity(CAPACITY, service_s=SERVICE_S)
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        max_batch_records=10,
        max_in_flight=32,
        local_retry_attempts=20,
    )
    connector = Connector(dest, kafka_settings, until_idle_s=1.5, metrics_port=0)
    samples: list[tuple[int, int]] = []
    pages: list[dict[str, Any]] = []
    await _run_sampling(connector, samples, pages)
    assert sorted(set(destination.delivered_ids())) == sorted(e["id"] for e in sent)
    [page] = pages
    assert (page["concurrency"]["mode"], page["concurrency"]["ceiling"]) == ("adaptive", 32)
    assert page["concurrency"]["rtt_mean_ms"] >= SERVICE_S * 1000
    assert await read_topic(kafka_settings, dest.retry_in_topic) == []
    assert await read_topic(kafka_settings, dest.dlq_topic) == []
    busy = [(limit, in_flight) for limit, in_flight in samples if in_flight > 0]
    later = busy[len(busy) // 2 :]
    assert CAPACITY - 1 <= statistics.median(limit for limit, _ in later) <= CAPACITY + 2
    assert max(in_flight for _, in_flight in later) <= max(limit for limit, _ in later)
    assert max(limit for limit, _ in samples) < 16  # nowhere near the ceiling of 32
    statuses = [r.status for r in destination.requests]
    assert statuses.count(503) < 0.25 * len(statuses)


async def test_fixed_concurrency_keeps_max_in_flight(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """`concurrency = "fixed"` keeps the limit at max_in_flight from the first request: at the
    destination's capacity, it is reached at once and no attempt meets a 503."""
    sent = events(400)
    await produce_events(kafka_settings, unique, sent)
    destination.set_capacity(CAPACITY, service_s=SERVICE_S)
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        max_batch_records=10,
        max_in_flight=CAPACITY,
        concurrency="fixed",
    )
    connector = Connector(dest, kafka_settings, until_idle_s=1.5)
    samples: list[tuple[int, int]] = []
    await _run_sampling(connector, samples, [])
    assert sorted(set(destination.delivered_ids())) == sorted(e["id"] for e in sent)
    assert {limit for limit, _ in samples} == {CAPACITY}
    assert destination.max_serving == CAPACITY
    assert [r.status for r in destination.requests].count(503) == 0
