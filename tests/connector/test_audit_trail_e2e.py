"""The connector's audit trail against a real broker and a real HTTP destination, in this process."""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import produce, produce_events
from hifi.audit import AUDIT_RETENTION_MS, decode_facts
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from tests.helpers import events, make_destination, read_facts


async def _run(connector: Connector, timeout_s: float = 60.0) -> None:
    await asyncio.wait_for(connector.run(), timeout_s)


async def _positions(settings: KafkaSettings, topic: str) -> dict[tuple[str, int, int], Any]:
    """Every record of `topic` by its position: the event's id and time, or the raw value."""
    found: dict[tuple[str, int, int], Any] = {}
    for record in await read_topic(settings, topic):
        try:
            event = orjson.loads(record.value)
            found[(topic, record.partition, record.offset)] = (event["id"], event["event_time"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            found[(topic, record.partition, record.offset)] = record.value
    return found


def _audit_metric(name: str, dest: str, outcome: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"dest": dest, "outcome": outcome})


async def test_every_delivered_event_is_named_once_by_a_delivered_fact(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Delivered facts name exactly the produced origins, each once, with its id, event time and
    when the connector took it in; the facts are counted by outcome."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=3)
    started_ms = int(time.time() * 1000)
    await produce_events(kafka_settings, unique, events(300))
    dest = make_destination(catalog_dir, unique, destination.url, unique, max_batch_records=40)
    audit = f"{unique}.audit"
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit))
    produced = await _positions(kafka_settings, unique)
    named = await read_facts(kafka_settings, audit)
    assert {n.outcome for n in named} == {"delivered"}
    assert collections.Counter(n.origin for n in named) == dict.fromkeys(produced, 1)
    assert {n.origin: (n.id, n.event_time_ms) for n in named} == produced
    assert all(started_ms <= n.taken_ms <= int(time.time() * 1000) for n in named)
    assert {(n.dest, n.status, n.reason) for n in named} == {(unique, 200, None)}
    assert {n.node.split("@")[0] for n in named} == {"connector"}
    records = await read_topic(kafka_settings, audit)
    facts = sum(len(decode_facts(r.value, r.headers)) for r in records)  # 1.4: several a record
    assert _audit_metric("hifi_audit_events_total", unique, "delivered") == 300
    assert _audit_metric("hifi_audit_facts_total", unique, "delivered") == facts
    assert facts >= 300 // 40  # one per request, not one per event


async def test_rejected_events_are_dead_lettered_facts_with_their_reason(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A destination answering 400 for some events: exactly those are named by dead_lettered
    facts (http_4xx, status 400), every other event by one delivered fact."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce_events(kafka_settings, unique, events(64))
    rejected = {"e-5", "e-17", "e-40"}
    destination.reject_ids(rejected)
    dest = make_destination(catalog_dir, unique, destination.url, unique, max_batch_records=64)
    audit = f"{unique}.audit"
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit))
    named = await read_facts(kafka_settings, audit)
    assert len({n.origin for n in named}) == len(named) == 64  # one outcome per event
    dead = [n for n in named if n.outcome == "dead_lettered"]
    assert sorted(n.id or "" for n in dead) == sorted(rejected)
    assert {(n.reason, n.status) for n in dead} == {("http_4xx", 400)}
    delivered = {n.id for n in named if n.outcome == "delivered"}
    assert delivered == set(destination.delivered_ids()) == {e["id"] for e in events(64)} - rejected


async def test_malformed_records_are_accounted_by_origin(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Records that are not events are named by their origin alone (no id), with the reason of
    their dead letter and the record's timestamp as their time."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(
        kafka_settings,
        unique,
        [b"not json", b"[1, 2]", b'{"id": "big", "p": "' + b"x" * 3000 + b'"}'],
    )
    await produce_events(kafka_settings, unique, events(5))
    dest = make_destination(catalog_dir, unique, destination.url, unique, max_batch_bytes=2048)
    audit = f"{unique}.audit"
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit))
    records = await read_topic(kafka_settings, unique)
    timestamps = {(unique, r.partition, r.offset): r.timestamp for r in records}
    named = await read_facts(kafka_settings, audit)
    dead = sorted(
        (n.origin, n.reason, n.id, n.event_time_ms) for n in named if n.outcome == "dead_lettered"
    )
    assert dead == [
        ((unique, 0, 0), "malformed", None, timestamps[(unique, 0, 0)]),
        ((unique, 0, 1), "malformed", None, timestamps[(unique, 0, 1)]),
        ((unique, 0, 2), "too_large", None, timestamps[(unique, 0, 2)]),
    ]
    assert all(n.taken_ms > 0 for n in named)
    assert sorted(n.origin[2] for n in named if n.outcome == "delivered") == [3, 4, 5, 6, 7]


async def test_audit_false_writes_no_fact_and_creates_no_audit_topic(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """With `[accounting] audit = false` deliveries and dead letters happen, and no audit topic."""
    await produce_events(kafka_settings, unique, events(20))
    destination.reject_ids({"e-3"})
    dest = make_destination(
        catalog_dir, unique, destination.url, unique, accounting={"audit": False}
    )
    audit = f"{unique}.audit"
    connector = Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit)
    assert connector.audit_topic is None
    await _run(connector)
    assert len(destination.delivered_ids()) == 19
    assert len(await read_topic(kafka_settings, dest.dlq_topic)) == 1
    assert audit not in await kafka_admin.list_topics(kafka_settings)
    assert _audit_metric("hifi_audit_events_total", unique, "delivered") is None


async def test_the_audit_topic_comes_from_the_environment_and_is_created_for_7_days(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HIFI_AUDIT_TOPIC names the audit topic; a missing one is created with 7 days' retention."""
    audit = f"{unique}.env-audit"
    monkeypatch.setenv("HIFI_AUDIT_TOPIC", audit)
    await produce_events(kafka_settings, unique, events(10))
    dest = make_destination(catalog_dir, unique, destination.url, unique)
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
    assert await kafka_admin.retention_ms(kafka_settings, [audit]) == {audit: AUDIT_RETENTION_MS}
    named = await read_facts(kafka_settings, audit)
    assert sorted(n.id or "" for n in named) == sorted(e["id"] for e in events(10))


async def test_an_existing_audit_topic_keeps_its_configuration(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """An audit topic that exists already keeps the retention it has; the facts go there."""
    audit = f"{unique}.audit"
    hour_ms = 3_600_000
    await kafka_admin.ensure_topics(kafka_settings, [audit], partitions=1, retention_ms=hour_ms)
    await produce_events(kafka_settings, unique, events(10))
    dest = make_destination(catalog_dir, unique, destination.url, unique)
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit))
    assert await kafka_admin.retention_ms(kafka_settings, [audit]) == {audit: hour_ms}
    assert len(await read_facts(kafka_settings, audit)) == 10
