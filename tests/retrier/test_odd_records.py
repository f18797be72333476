"""The retrier holds to the connector's rule: no record on NAME.retry_in stops it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hifi.headers import header_map
from hifi.kafka.clients import Record
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import committed_offsets, read_topic
from hifi.kafka.settings import KafkaSettings
from retrier.daemon import Retrier
from tests.helpers import make_destination
from tests.retrier.support import create_topics

pytestmark = [pytest.mark.integration]


async def test_odd_hand_offs_are_routed_or_expired_never_a_crash(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """Hand-offs without hifi headers, with unreadable ones, huge ones or no value each end
    re-offered or dead-lettered; the retrier exits only when idle and commits to the end."""
    dest = make_destination(
        catalog_dir,
        unique,
        "http://127.0.0.1:9/",
        unique,
        retry_tiers_s=[0.5],
        internal_topic_partitions=1,
    )
    await create_topics(kafka_settings, dest)
    odd: list[Record] = [
        (dest.retry_in_topic, b"k1", b'{"id":"bare"}', []),
        (
            dest.retry_in_topic,
            b"k2",
            b'{"id":"garbage"}',
            [
                ("hifi-attempt", b"many"),
                ("hifi-handoff-ms", b"9" * 5000),
                ("hifi-first-failure-ms", b"-3"),
                ("hifi-due-ms", b"soon"),
            ],
        ),
        (dest.retry_in_topic, b"k3", b'{"id":"huge-header"}', [("trace", b"t" * 300_000)]),
        (dest.retry_in_topic, b"k4", None, [("hifi-attempt", b"1")]),
        (dest.retry_in_topic, b"k5", b"not json at all", [("hifi-attempt", b"7")]),
    ]
    async with open_producer(kafka_settings) as producer:
        await producer.send_all(odd)
    retrier = Retrier([dest], kafka_settings, group_id=f"hifi.retrier.{unique}", until_idle_s=3)
    await asyncio.wait_for(retrier.run(), 120)
    out = await read_topic(kafka_settings, dest.retry_out_topic)
    dead = await read_topic(kafka_settings, dest.dlq_topic)
    assert sorted(r.key for r in out + dead) == [b"k1", b"k2", b"k3", b"k4", b"k5"]
    assert [r.key for r in dead] == [b"k5"]  # its 7th hand-off: every tier used
    assert header_map(dead[0].headers)["hifi-reason"] == b"expired"
    committed = await committed_offsets(kafka_settings, retrier.group_id, dest.retry_in_topic)
    assert committed == {0: len(odd)}
