"""The connector's consumer lag while its breaker is open and its intake paused: what arrives
meanwhile, in a source topic or in NAME.retry_out, counts (a real broker and destination)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from connector.daemon import Connector
from devstack.destination import Reply, TestDestination
from devstack.kafka_tools import committed_offsets, produce_events
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings
from tests.helpers import events, make_destination, ops_status, running, until

pytestmark = [pytest.mark.integration]


async def _produce_one_by_one(settings: KafkaSettings, topic: str, sent: Iterable[Any]) -> None:
    """Each event its own batch: Tansu 0.6 answers a paused partition's end with its last batch
    counted as one record (`hifi/worker/ends.py`)."""
    async with open_producer(settings) as producer:
        for event in sent:
            await producer.send_all([(topic, event["id"].encode(), orjson.dumps(event), [])])


def _lag_of(status: dict[str, Any], topic: str) -> int | None:
    """The connector's lag over every partition of `topic`; None while it reports none."""
    found = [
        n for name, n in status["consumer_lag_records"].items() if name.startswith(topic + "/")
    ]
    return sum(found) if found else None


async def test_an_open_breaker_leaves_the_lag_of_its_paused_partitions_true(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """With the breaker open (a 404 on every request) and intake paused, 20 events produced to
    the source topic and 10 re-offers to NAME.retry_out raise the consumer lag by as many: the
    source's is its end minus the group's committed offset, NAME.retry_out's (never taken) 10."""
    await produce_events(kafka_settings, unique, events(100, prefix=unique))
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        max_batch_records=20,
        max_in_flight=2,
        breaker_failures=2,
        breaker_max_open_s=60.0,
    )
    destination.set_faults(1.0, [Reply(404)])
    connector = Connector(dest, kafka_settings, metrics_port=0)
    async with running(connector):
        assert await until(lambda: _breaker_state(unique) == 2, 30)
        assert (await ops_status(connector.ops))["intake"]["paused"] is True
        await _produce_one_by_one(kafka_settings, unique, events(20, prefix=unique, start=100))
        await _produce_one_by_one(kafka_settings, dest.retry_out_topic, events(10, prefix="r"))
        lags: tuple[int | None, int | None] = (None, None)
        for _ in range(100):
            committed = await committed_offsets(kafka_settings, dest.connector_group, unique)
            status = await ops_status(connector.ops)
            lags = (_lag_of(status, unique), _lag_of(status, dest.retry_out_topic))
            if lags == (120 - sum(n or 0 for n in committed.values()), 10):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"lag of the source, of retry_out: {lags}")
        assert status["intake"]["paused"] is True
        assert _gauge_sum(unique, dest.retry_out_topic) == 10  # what KEDA and the alert read


def _breaker_state(dest: str) -> float | None:
    return REGISTRY.get_sample_value("hifi_connector_breaker_state", {"dest": dest})


def _gauge_sum(dest: str, topic: str) -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "hifi_connector_consumer_lag_records"
        for sample in metric.samples
        if sample.labels.get("dest") == dest and sample.labels.get("topic") == topic
    )
