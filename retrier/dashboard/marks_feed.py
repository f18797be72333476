"""Replay marks made anywhere (`retrier dlq replay`, another retrier, this one before a restart)
brought into the dashboard's index by following each NAME.dlq_replays.

The dashboard's own replays mark the index as they go; reading them back here again is
harmless (a mark is the last replay of a letter, by time).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence

import structlog
from aiokafka import TopicPartition

from config.destination import Destination
from hifi.background import in_background
from hifi.errors import HifiError, ReplayRecordRefused
from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings
from retrier.dlq.index import DeadLetterIndex
from retrier.replays import decode_replay

log = structlog.get_logger(__name__)

_FETCH_WAIT_MS = 1000
_DISCOVER_EVERY_S = 10.0
_RETRY_S = 5.0


@contextlib.asynccontextmanager
async def following_marks(
    settings: KafkaSettings, dests: Sequence[Destination], indexes: Mapping[str, DeadLetterIndex]
) -> AsyncIterator[None]:
    """Apply every replay record of the destinations' NAME.dlq_replays to their indexes, by a
    task that ends with the block."""
    by_topic = {dest.dlq_replays_topic: indexes[dest.name] for dest in dests}
    async with in_background(_follow_forever(settings, by_topic), name="retrier-replay-marks"):
        yield


async def _follow_forever(settings: KafkaSettings, by_topic: Mapping[str, DeadLetterIndex]) -> None:
    positions: dict[TopicPartition, int] = {}
    while True:
        try:
            async with open_consumer(
                settings,
                group_id=None,
                isolation_level="read_uncommitted",
                metadata_max_age_ms=int(_DISCOVER_EVERY_S * 1000),
            ) as reader:
                await _follow(reader, by_topic, positions)
        except HifiError as exc:
            log.warning("replay_marks_read_failed", error=str(exc), retry_in_s=_RETRY_S)
            await asyncio.sleep(_RETRY_S)


async def _follow(
    reader: Consumer,
    by_topic: Mapping[str, DeadLetterIndex],
    positions: dict[TopicPartition, int],
) -> None:
    """Read on from `positions` (kept across reconnections), looking for new topics now and then."""
    loop = asyncio.get_running_loop()
    assigned: set[TopicPartition] = set()
    next_look = loop.time()
    while True:
        if loop.time() >= next_look:
            await reader.topics()
            found = {tp for topic in by_topic for tp in reader.partitions(topic)}
            if found != assigned:
                reader.assign(found)
                for tp in found:
                    if tp in positions:
                        reader.seek(tp, positions[tp])
                    else:
                        await reader.seek_to_beginning(tp)
                assigned = found
            next_look = loop.time() + _DISCOVER_EVERY_S
        if not assigned:
            await asyncio.sleep(_DISCOVER_EVERY_S)
            continue
        fetched = await reader.getmany(timeout_ms=_FETCH_WAIT_MS)
        for tp, records in fetched.items():
            _apply(by_topic[tp.topic], tp, records)
            positions[tp] = records[-1].offset + 1


def _apply(index: DeadLetterIndex, tp: TopicPartition, records: list[object]) -> None:
    """One fetch's replay records as one mark per operator (the latest time of theirs): a mark
    scans the index's columns, so it is applied once per fetch, not once per record."""
    skipped, first = 0, ""
    by_operator: dict[str, tuple[int, list[tuple[int, int]]]] = {}
    for record in records:
        try:
            replay = decode_replay(getattr(record, "value", None))
        except ReplayRecordRefused as exc:
            skipped += 1
            first = first or f"{tp.topic}/{tp.partition}/{getattr(record, 'offset', '?')}: {exc}"
            continue
        at_ms, coords = by_operator.get(replay.by, (0, []))
        coords.extend(replay.coordinates())
        by_operator[replay.by] = (max(at_ms, replay.at_ms), coords)
    for by, (at_ms, coords) in by_operator.items():
        index.mark_replayed(coords, at_ms=at_ms, by=by)
    if skipped:
        log.warning("replay_records_skipped", topic=tp.topic, skipped=skipped, first=first)
