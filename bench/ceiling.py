"""The ceiling: how fast plain aiokafka consumes and commits the topic on this machine, no HTTP."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from config.settings import KafkaSettings
from plumbing import kafka

_POLL_TIMEOUT_MS = 200
_COMMIT_INTERVAL_S = 1.0  # the connector's default commit_interval_s
_MAX_RECORDS = 8000  # the connector's intake buffer at default settings (8 x 500 x 2)


async def consume_and_commit(
    settings: KafkaSettings, topic: str, *, events: int, group_id: str, timeout_s: float
) -> float:
    """Read `events` records from the start of `topic` with the connector's fetch sizes; events/s.

    The rate runs from the first poll that returned records to the last, and leaves out the
    records of that first poll (their wait is the group join, not consumption).
    """
    consumer = kafka.consumer(
        settings,
        group_id=group_id,
        fetch_max_bytes=16 * 1024 * 1024,
        max_partition_fetch_bytes=1024 * 1024,
    )
    consumer.subscribe(topics=[topic])
    await consumer.start()
    loop = asyncio.get_running_loop()
    try:
        deadline = loop.time() + timeout_s
        seen, first_count = 0, 0
        first_at = last_at = next_commit = 0.0
        positions: dict[TopicPartition, int] = {}
        while seen < events and loop.time() < deadline:
            fetched = await consumer.getmany(timeout_ms=_POLL_TIMEOUT_MS, max_records=_MAX_RECORDS)
            now = loop.time()
            for tp, records in fetched.items():
                seen += len(records)
                positions[tp] = records[-1].offset + 1
            if fetched and not first_count:
                first_count, first_at, next_commit = seen, now, now + _COMMIT_INTERVAL_S
            if fetched:
                last_at = now
            if positions and now >= next_commit:
                await consumer.commit(positions)
                next_commit = now + _COMMIT_INTERVAL_S
        await consumer.commit(positions)
        last_at = loop.time()
    finally:
        await consumer.stop()
    if seen < events:
        raise RuntimeError(f"ceiling: read {seen} of {events} records in {timeout_s}s")
    return (seen - first_count) / (last_at - first_at) if last_at > first_at else 0.0
