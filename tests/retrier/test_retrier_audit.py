"""The retrier's audit facts: re-offers and expiries, named as the connector named the events."""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import pytest

from connector.daemon import Connector
from devstack.destination import Reply, TestDestination
from devstack.kafka_tools import produce_events
from hifi.headers import header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from retrier.daemon import Retrier
from tests.helpers import events, make_destination, read_facts, running
from tests.retrier.support import collect, create_topics, handoff, produce_all

pytestmark = [pytest.mark.integration]


async def test_a_503_outage_is_handed_off_re_offered_then_delivered_by_origin(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Every event of an outage has a handed_off fact (connector), a re_offered fact (retrier,
    with the id and event time the connector read) and finally one delivered fact, all naming
    the origin in the source topic, never a position in the retry topics."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=2)
    sent = events(12)
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        retry_tiers_s=[1, 1],
        local_retry_attempts=2,
        local_retry_max_backoff_s=0.01,
    )
    await create_topics(kafka_settings, dest)
    destination.set_faults(1.0, [Reply(503)])
    await produce_events(kafka_settings, unique, sent)
    audit = f"{unique}.audit"
    connector = Connector(dest, kafka_settings, audit_topic=audit)
    retrier = Retrier([dest], kafka_settings, group_id=f"hifi.retrier.{unique}", audit_topic=audit)
    async with running(connector, retrier):
        await collect(kafka_settings, dest.retry_in_topic, len(sent))  # every event handed off
        destination.reset_script()  # before the first re-offer is due
        assert await destination.wait_for_ids([e["id"] for e in sent], 60)
    source = {(unique, r.partition, r.offset): r for r in await read_topic(kafka_settings, unique)}
    named = await read_facts(kafka_settings, audit)
    by_outcome = collections.defaultdict(list)
    for n in named:
        by_outcome[n.outcome].append(n)
    assert set(by_outcome) == {"handed_off", "re_offered", "delivered"}
    for outcome in ("handed_off", "re_offered", "delivered"):
        assert {n.origin for n in by_outcome[outcome]} == set(source), outcome
    assert len(by_outcome["delivered"]) == len(sent)  # each delivered once, from retry_out
    sent_times = {e["id"]: e["event_time"] for e in sent}
    for n in named:
        record = source[n.origin]
        assert n.id == record.key.decode()
        assert n.event_time_ms == sent_times[n.id]
    assert {n.status for n in by_outcome["handed_off"]} == {503}
    assert {n.node.split("@")[0] for n in by_outcome["re_offered"]} == {"retrier"}
    assert {n.taken_ms for n in by_outcome["re_offered"]} == {0}
    assert all(n.taken_ms > 0 for n in by_outcome["handed_off"] + by_outcome["delivered"])


async def test_expired_events_are_dead_lettered_facts_with_reason_expired(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Events outliving their tiers: the retrier's dead_lettered facts say `expired` and name
    each event by its origin, id and event time."""
    sent = events(8)
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        retry_tiers_s=[0.5],
        local_retry_attempts=1,
        internal_topic_partitions=1,
    )
    await create_topics(kafka_settings, dest)
    await destination.set_down(True)
    await produce_events(kafka_settings, unique, sent)
    audit = f"{unique}.audit"
    connector = Connector(dest, kafka_settings, audit_topic=audit)
    retrier = Retrier([dest], kafka_settings, group_id=f"hifi.retrier.{unique}", audit_topic=audit)
    async with running(connector, retrier):
        dead = await collect(kafka_settings, dest.dlq_topic, len(sent))
    origins = {header_map(r.headers)["hifi-origin"].decode() for r in dead}
    named = await read_facts(kafka_settings, audit)
    expired = [n for n in named if n.outcome == "dead_lettered"]
    assert {(n.reason, n.status, n.node.split("@")[0]) for n in expired} == {
        ("expired", None, "retrier")
    }
    assert {"/".join(map(str, n.origin)) for n in expired} == origins
    assert sorted((n.id, n.event_time_ms) for n in expired) == sorted(
        (e["id"], e["event_time"]) for e in sent
    )
    # Down: no reply, so the hand-offs' facts carry no status.
    assert {n.status for n in named if n.outcome == "handed_off"} == {None}


async def test_only_destinations_that_audit_have_retrier_facts(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """`[accounting] audit = false` for one destination: its re-offers write no fact, another's do."""
    quiet = make_destination(
        catalog_dir,
        f"{unique}-quiet",
        "http://127.0.0.1:9/",
        unique,
        retry_tiers_s=[0.2],
        accounting={"audit": False},
    )
    loud = make_destination(
        catalog_dir, f"{unique}-loud", "http://127.0.0.1:9/", unique, retry_tiers_s=[0.2]
    )
    await create_topics(kafka_settings, quiet, loud)
    now_ms = int(time.time() * 1000)
    await produce_all(
        kafka_settings,
        [
            handoff(d, f"{d.name}-{i}", attempt=1, handoff_ms=now_ms)
            for d in (quiet, loud)
            for i in range(5)
        ],
    )
    audit = f"{unique}.audit"
    retrier = Retrier(
        [quiet, loud],
        kafka_settings,
        group_id=f"hifi.r.{unique}",
        until_idle_s=2,
        audit_topic=audit,
    )
    await asyncio.wait_for(retrier.run(), 120)
    assert len(await read_topic(kafka_settings, quiet.retry_out_topic)) == 5
    named = await read_facts(kafka_settings, audit)
    assert {(n.dest, n.outcome) for n in named} == {(loud.name, "re_offered")}
    assert sorted(n.id or "" for n in named) == [f"{loud.name}-{i}" for i in range(5)]
    assert {n.event_time_ms for n in named} == {now_ms}


async def test_a_retrier_of_destinations_that_do_not_audit_creates_no_audit_topic(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """No destination audits: the retrier re-offers and creates no audit topic."""
    dest = make_destination(
        catalog_dir,
        unique,
        "http://127.0.0.1:9/",
        unique,
        retry_tiers_s=[0.2],
        accounting={"audit": False},
    )
    await create_topics(kafka_settings, dest)
    now_ms = int(time.time() * 1000)
    await produce_all(kafka_settings, [handoff(dest, "a", attempt=1, handoff_ms=now_ms)])
    audit = f"{unique}.audit"
    retrier = Retrier(
        [dest], kafka_settings, group_id=f"hifi.r.{unique}", until_idle_s=2, audit_topic=audit
    )
    await asyncio.wait_for(retrier.run(), 120)
    assert len(await read_topic(kafka_settings, dest.retry_out_topic)) == 1
    assert audit not in await kafka_admin.list_topics(kafka_settings)
