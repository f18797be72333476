"""Kafka helpers for tests, the demo, benchmarks and chaos runs: produce events, read a topic, find dead letters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
import orjson
from aiokafka import TopicPartition

from hifi.headers import HDR_ORIGIN, HDR_REASON, header_map
from hifi.kafka import reading
from hifi.kafka.clients import Record
from hifi.kafka.consuming import open_consumer
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings


async def produce(
    settings: KafkaSettings,
    topic: str,
    values: Iterable[bytes],
    *,
    headers: Sequence[tuple[str, bytes]] = (),
    key: bytes | None = None,
) -> int:
    """Produce raw values with acks=all and return how many were acknowledged."""
    records = [(topic, key, value, list(headers)) for value in values]
    async with open_producer(settings) as producer:
        await producer.send_all(records)
    return len(records)


async def produce_events(
    settings: KafkaSettings, topic: str, events: Iterable[dict[str, Any]]
) -> int:
    """Produce JSON events, keyed by their `id` so one id always lands on one partition."""
    records: list[Record] = [
        (topic, str(event.get("id", "")).encode(), orjson.dumps(event), []) for event in events
    ]
    async with open_producer(settings) as producer:
        await producer.send_all(records)
    return len(records)


async def read_topic(settings: KafkaSettings, topic: str, *, timeout_s: float = 30.0) -> list[Any]:
    """Every record of `topic` from the beginning to its end."""
    return await reading.read_topic(settings, topic, timeout_s=timeout_s)


async def ids_in(settings: KafkaSettings, topic: str) -> set[str]:
    """The `id` of every JSON event in `topic` (delivered, handed off or dead-lettered ones)."""
    return {msgspec.json.decode(record.value)["id"] for record in await read_topic(settings, topic)}


async def committed_offsets(
    settings: KafkaSettings, group_id: str, topic: str
) -> dict[int, int | None]:
    """Committed offsets of a consumer group, read through a consumer (works on Tansu too)."""
    return await reading.committed_offsets(settings, group_id, topic)


async def dead_letters(
    settings: KafkaSettings, dest: str, *, timeout_s: float = 60.0
) -> dict[str, str]:
    """Event id -> hifi-reason for every record in `dest`.dlq; records that are not JSON objects
    with an id are keyed by their hifi-origin (topic/partition/offset)."""
    found: dict[str, str] = {}
    for record in await read_topic(settings, f"{dest}.dlq", timeout_s=timeout_s):
        headers = header_map(record.headers)
        reason = headers.get(HDR_REASON, b"?").decode()
        try:
            key = str(msgspec.json.decode(record.value)["id"])
        except (msgspec.DecodeError, KeyError, TypeError):
            key = headers.get(HDR_ORIGIN, b"?").decode()
        found[key] = reason
    return found


async def move_committed(
    settings: KafkaSettings, group_id: str, topic: str, partition: int, offset: int
) -> None:
    """Set a (stopped) consumer group's committed offset of one partition, as an operator would
    with kafka-consumer-groups --reset-offsets: a plain consumer joins the group, takes every
    partition (no other member runs) and commits the offset."""
    tp = TopicPartition(topic, partition)
    async with open_consumer(settings, group_id=group_id) as consumer:
        consumer.subscribe([topic])
        for _ in range(100):
            if tp in consumer.assignment():
                break
            await consumer.getmany(timeout_ms=200, max_records=1)
        else:
            raise TimeoutError(f"group {group_id} never assigned {topic}/{partition}")
        await consumer.commit({tp: offset})
