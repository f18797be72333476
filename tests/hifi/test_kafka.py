"""The Kafka plumbing against the real broker fixture."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.partitioner import murmur2

from hifi.kafka import admin as kafka_admin
from hifi.kafka.clients import Record
from hifi.kafka.consuming import open_consumer
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings


async def test_produce_consume_round_trip(kafka_settings: KafkaSettings, unique: str) -> None:
    """Records written with acks=all come back with key, value and headers through a group consumer."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=2)
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=2)  # idempotent
    async with open_producer(kafka_settings) as producer:
        await producer.send_all(
            [(unique, f"k{i}".encode(), orjson.dumps({"id": i}), [("h", b"v")]) for i in range(50)]
        )
    async with open_consumer(kafka_settings, group_id=f"{unique}.g") as consumer:
        consumer.subscribe([unique])
        seen: list[Any] = []
        while len(seen) < 50:
            fetched = await consumer.getmany(timeout_ms=1000)
            for records in fetched.values():
                seen.extend(records)
        assert sorted(orjson.loads(r.value)["id"] for r in seen) == list(range(50))
        assert all(list(r.headers) == [("h", b"v")] for r in seen)
        offsets = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in seen}
        await consumer.commit(offsets)
        for tp, offset in offsets.items():
            assert await consumer.committed(tp) == offset
    assert len(await read_topic(kafka_settings, unique)) == 50
    assert len(await read_topic(kafka_settings, unique, at_least=10)) >= 10


async def test_concurrent_sends_never_interleave_within_a_partition(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """Two calls in flight at once, each alternating between two partitions with batches that
    fill: in each partition one call's records come wholly before the other's (a retry tier is
    read in due order, so an interleaved tier would hold early events behind late ones)."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=2)
    body = b"x" * 200
    async with open_producer(kafka_settings, max_batch_size=1024) as producer:
        await asyncio.gather(
            *(producer.send_all(_alternating(unique, call, body, 60)) for call in "ab")
        )
    written = await read_topic(kafka_settings, unique, at_least=120)
    for partition in (0, 1):
        calls = [r.key[:1] for r in written if r.partition == partition]
        assert calls in ([b"a"] * 30 + [b"b"] * 30, [b"b"] * 30 + [b"a"] * 30), calls


def _alternating(topic: str, call: str, body: bytes, count: int) -> list[Record]:
    """`count` records of one call whose keys land alternately in partitions 0 and 1."""
    keys: dict[int, list[bytes]] = {0: [], 1: []}
    for i in itertools.count():
        key = f"{call}{i}".encode()
        keys[(murmur2(key) & 0x7FFFFFFF) % 2].append(key)
        if min(len(found) for found in keys.values()) >= count // 2:
            break
    ordered = [key for pair in zip(keys[0], keys[1], strict=False) for key in pair][:count]
    return [(topic, key, body, []) for key in ordered]


async def test_a_stop_interrupted_by_an_internal_cancellation_still_closes_the_client(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """aiokafka's consumer.stop() marks itself closed, then its coordinator's close can raise the
    cancellation of an internal task: the network client (its metadata task, its sockets) must be
    closed all the same, or it refreshes metadata for the life of the process."""
    from hifi.kafka.clients import stop_client as _stop

    async with open_consumer(kafka_settings, group_id=f"{unique}.g") as consumer:
        client = consumer._client  # the aiokafka consumer under hifi's
        network = client._client
        assert network._sync_task is not None  # the metadata task runs

        close_coordinator = client._coordinator.close

        async def coordinator_close_cancelled() -> None:
            await close_coordinator()
            raise asyncio.CancelledError  # as its committed-offsets refresh task's can

        client._coordinator.close = coordinator_close_cancelled
        await _stop(client)
        assert network._sync_task is None  # closed: no metadata task left
        assert not any(conn.connected() for conn in network._conns.values())
