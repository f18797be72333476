"""Kafka helpers for tests, the demo, benchmarks and chaos runs: produce events, read a topic to its end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from config.settings import KafkaSettings
from plumbing import kafka
from plumbing.envelope import HDR_ORIGIN, HDR_REASON, header_map


async def produce(
    settings: KafkaSettings,
    topic: str,
    values: Iterable[bytes],
    *,
    headers: Sequence[tuple[str, bytes]] = (),
    key: bytes | None = None,
) -> int:
    """Produce raw values with acks=all and return how many were acknowledged."""
    producer = AIOKafkaProducer(**kafka.client_options(settings), acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=value, key=key, headers=list(headers))
            for value in values
        ]
        await asyncio.gather(*futures)
        return len(futures)
    finally:
        await producer.stop()


async def produce_events(
    settings: KafkaSettings, topic: str, events: Iterable[dict[str, Any]]
) -> int:
    """Produce JSON events, keyed by their `id` so one id always lands on one partition."""
    producer = AIOKafkaProducer(**kafka.client_options(settings), acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, value=orjson.dumps(event), key=str(event.get("id", "")).encode()
            )
            for event in events
        ]
        await asyncio.gather(*futures)
        return len(futures)
    finally:
        await producer.stop()


async def read_topic(settings: KafkaSettings, topic: str, *, timeout_s: float = 30.0) -> list[Any]:
    """Every record of `topic` from the beginning to its end."""
    return await kafka.read_to_end(settings, topic, timeout_s=timeout_s)


async def committed_offsets(
    settings: KafkaSettings, group_id: str, topic: str
) -> dict[int, int | None]:
    """Committed offsets of a consumer group, read through a consumer (works on Tansu too)."""
    consumer = AIOKafkaConsumer(
        **kafka.client_options(settings), group_id=group_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in sorted(partitions)}
    finally:
        await consumer.stop()


async def dead_letters(
    settings: KafkaSettings, dest: str, *, timeout_s: float = 60.0
) -> dict[str, str]:
    """Event id -> hifi-reason for every record in `dest`.dlq; records that are not JSON objects
    with an id are keyed by their hifi-origin (topic/partition/offset)."""
    found: dict[str, str] = {}
    for record in await kafka.read_to_end(settings, f"{dest}.dlq", timeout_s=timeout_s):
        headers = header_map(record.headers)
        reason = headers.get(HDR_REASON, b"?").decode()
        try:
            key = str(orjson.loads(record.value)["id"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            key = headers.get(HDR_ORIGIN, b"?").decode()
        found[key] = reason
    return found
