"""The ceiling: how fast plain aiokafka consumes and commits the topic on this machine, no HTTP."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from bench.catalog import bench_destination
from connector.intake import consumer_options, intake_limit
from hifi.kafka.consuming import open_consumer
from hifi.kafka.settings import KafkaSettings

_POLL_TIMEOUT_MS = 200
_COMMIT_INTERVAL_S = 1.0  # the connector's default commit_interval_s


async def consume_and_commit(
    settings: KafkaSettings, topic: str, *, events: int, group_id: str, timeout_s: float
) -> float:
    """Read `events` records from the start of `topic` with the connector's fetch sizes; events/s.

    The rate runs from the first poll that returned records to the last, and leaves out the
    records of that first poll (their wait is the group join, not consumption).
    """
    dest = bench_destination(topic)
    max_records = intake_limit(dest)
    loop = asyncio.get_running_loop()
    async with open_consumer(settings, group_id=group_id, **consumer_options(dest)) as consumer:
        consumer.subscribe([topic])
        deadline = loop.time() + timeout_s
        seen, first_count = 0, 0
        first_at = last_at = next_commit = 0.0
        positions: dict[TopicPartition, int] = {}
        while seen < events and loop.time() < deadline:
            fetched = await consumer.getmany(timeout_ms=_POLL_TIMEOUT_MS, max_records=max_records)
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
    if seen < events:
        raise RuntimeError(f"ceiling: read {seen} of {events} records in {timeout_s}s")
    return (seen - first_count) / (last_at - first_at) if last_at > first_at else 0.0
