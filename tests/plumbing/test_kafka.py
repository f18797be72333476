"""The Kafka plumbing against the real broker fixture."""

from __future__ import annotations

from typing import Any

import orjson
from aiokafka import TopicPartition

from config.settings import KafkaSettings
from plumbing import kafka


async def test_produce_consume_round_trip(kafka_settings: KafkaSettings, unique: str) -> None:
    """Records written with acks=all come back with key, value and headers through a group consumer."""
    await kafka.ensure_topics(kafka_settings, [unique], partitions=2)
    await kafka.ensure_topics(kafka_settings, [unique], partitions=2)  # idempotent
    async with kafka.producer(kafka_settings) as producer:
        await producer.send_all(
            [(unique, f"k{i}".encode(), orjson.dumps({"id": i}), [("h", b"v")]) for i in range(50)]
        )
    consumer = kafka.consumer(kafka_settings, group_id=f"{unique}.g")
    consumer.subscribe([unique])
    await consumer.start()
    try:
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
    finally:
        await consumer.stop()
    assert len(await kafka.read_to_end(kafka_settings, unique)) == 50
