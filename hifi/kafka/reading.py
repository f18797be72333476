"""A topic read to its end, records at given offsets, a group's committed offsets: for tools, tests, checks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition

from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings

_SEEK_GAP_RECORDS = 1000  # read_at seeks over a gap wider than this
_READ_POLL_MS = 300


async def read_topic(
    settings: KafkaSettings, topic: str, *, at_least: int = 0, timeout_s: float = 30.0
) -> list[Any]:
    """Every record of `topic` from its beginning to its end, or until `at_least` have arrived.

    Reads without a consumer group, so it never disturbs one; a topic that does not exist has
    no records. Raises `TimeoutError` if neither is reached in `timeout_s`.
    """
    records: list[Any] = []
    batches = topic_batches(settings, topic, at_least=at_least, timeout_s=timeout_s)
    async with contextlib.aclosing(batches):
        async for batch in batches:
            records.extend(batch)
    return records


async def topic_batches(
    settings: KafkaSettings, topic: str, *, at_least: int = 0, timeout_s: float = 30.0
) -> AsyncGenerator[list[Any], None]:
    """`read_topic`'s records a partition's fetch at a time, for a topic too large to hold;
    iterate it inside `contextlib.aclosing`, so its consumer stops whenever the reading ends."""
    async with open_consumer(settings, group_id=None, isolation_level="read_uncommitted") as reader:
        tps = reader.partitions(topic)
        if not tps and not at_least:
            return
        seen = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if not tps:  # wait for the topic to be created
                await asyncio.sleep(_READ_POLL_MS / 1000)
                await reader.topics()
                tps = reader.partitions(topic)
                continue
            if not reader.assignment():
                reader.assign(tps)
                await reader.seek_to_beginning(*tps)
            fetched = await reader.getmany(timeout_ms=_READ_POLL_MS)
            for batch in fetched.values():
                seen += len(batch)
                yield batch
            if at_least and seen >= at_least:
                return
            if not at_least and not fetched and await at_end(reader, tps):
                return
        if at_least:
            return
        raise TimeoutError(f"reading {topic} did not reach its end in {timeout_s}s")


async def read_at(
    settings: KafkaSettings,
    topic: str,
    offsets: Mapping[int, Sequence[int]],
    *,
    chunk_records: int = 500,
    timeout_s: float = 60.0,
) -> AsyncGenerator[list[Any], None]:
    """The records of `topic` at `offsets` (partition -> offsets), in chunks of at most
    `chunk_records`, partition by partition in offset order.

    Reads without a consumer group. Between wanted offsets more than a fetch apart it seeks
    instead of reading through; an offset no longer in the topic (retention, compaction) is
    skipped. Raises `TimeoutError` when a partition makes no progress for `timeout_s`. Close it
    (`contextlib.aclosing`) when leaving before the end.
    """
    async with open_consumer(
        settings,
        group_id=None,
        isolation_level="read_uncommitted",
        max_partition_fetch_bytes=1024 * 1024,
    ) as reader:
        chunk: list[Any] = []
        for partition, wanted_offsets in sorted(offsets.items()):
            tp = TopicPartition(topic, partition)
            async for record in _read_partition_at(
                reader, tp, sorted(set(wanted_offsets)), timeout_s, chunk_records
            ):
                chunk.append(record)
                if len(chunk) >= chunk_records:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk


async def _read_partition_at(
    reader: Consumer, tp: TopicPartition, wanted: list[int], timeout_s: float, max_records: int
) -> AsyncIterator[Any]:
    """The records of one partition at the sorted offsets `wanted` (those still in the topic).

    The partition's end is taken from the fetch responses (some brokers answer ListOffsets
    short of the end): reading stops once the position reaches the high watermark.
    """
    if not wanted:
        return
    loop = asyncio.get_running_loop()
    reader.assign([tp])
    index = 0
    reader.seek(tp, wanted[0])
    deadline = loop.time() + timeout_s
    while index < len(wanted):
        # at most a chunk taken out of the fetch at a time: the rest stays in its raw bytes
        polled = await reader.getmany(timeout_ms=_READ_POLL_MS, max_records=max_records)
        fetched = polled.get(tp, [])
        if not fetched:
            highwater = reader.highwater(tp)
            if highwater is not None and await reader.position(tp) >= highwater:
                return  # the rest of `wanted` is past the end
            if loop.time() > deadline:
                raise TimeoutError(f"reading {tp.topic}/{tp.partition} made no progress")
            continue
        deadline = loop.time() + timeout_s
        for record in fetched:
            while index < len(wanted) and wanted[index] < record.offset:
                index += 1  # gone from the topic
            if index < len(wanted) and wanted[index] == record.offset:
                index += 1
                yield record
        if index < len(wanted) and wanted[index] > fetched[-1].offset + _SEEK_GAP_RECORDS:
            reader.seek(tp, wanted[index])


async def at_end(reader: Consumer, tps: Sequence[TopicPartition]) -> bool:
    """Whether each of `tps` was read to the end its last fetch reported."""
    for tp in tps:
        highwater = reader.highwater(tp)
        if highwater is None or await reader.position(tp) < highwater:
            return False
    return True


async def committed_offsets(
    settings: KafkaSettings, group_id: str, topic: str
) -> dict[int, int | None]:
    """Committed offsets of a consumer group for `topic`, read through a consumer of that group
    that never joins it (works on brokers without the admin offsets API)."""
    async with open_consumer(settings, group_id=group_id) as reader:
        return {tp.partition: await reader.committed(tp) for tp in reader.partitions(topic)}
