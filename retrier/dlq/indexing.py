"""Keeping the dead-letter indexes: one task tails every NAME.dlq from its beginning into its `DeadLetterIndex`.

The task reads without a consumer group (every partition assigned, from the beginning), so it
disturbs no group and sees every letter. It looks for new DLQ topics and partitions every
`DISCOVER_EVERY_S`; a DLQ created later is read by a new consumer (a running one learns only of
the partitions of topics it already reads). A Kafka error is logged as a warning and the
reading starts again after a pause, from the letters already indexed: the retrier's own work
never depends on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import structlog
from aiokafka import TopicPartition

from config.destination import Destination
from hifi.background import in_background
from hifi.errors import HifiError
from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings
from retrier.dlq.index import DeadLetterIndex

log = structlog.get_logger(__name__)

DISCOVER_EVERY_S = 10.0
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
_FETCH_WAIT_MS = 500
_FETCH_RECORDS = 1000  # per fetch: indexing one fetch holds the event loop for tens of ms at most
_FETCH_PARTITION_BYTES = 1024 * 1024  # what a DLQ partition's prefetch may hold in memory


@contextlib.asynccontextmanager
async def indexing(
    settings: KafkaSettings, dests: Sequence[Destination], *, spill_dir: Path | None = None
) -> AsyncIterator[dict[str, DeadLetterIndex]]:
    """`{dest name: DeadLetterIndex}` of `dests`, kept up to date by a task that ends with the block.

    Each index spills to `spill_dir`/NAME (emptied first: the index is rebuilt at every start),
    or to a temporary directory removed at the end. Each index's `ready` is set once it holds
    every letter its DLQ held when the task first saw it; meanwhile `len(index)` of
    `index.expected` are in.
    """
    with contextlib.ExitStack() as stack:
        root = spill_dir or Path(stack.enter_context(tempfile.TemporaryDirectory("-dlq-index")))
        indexes: dict[str, DeadLetterIndex] = {}
        for dest in dests:
            directory = root / dest.name
            shutil.rmtree(directory, ignore_errors=True)
            indexes[dest.name] = stack.enter_context(
                DeadLetterIndex(dest.dlq_topic, spill_dir=directory)
            )
        by_topic = {index.topic: index for index in indexes.values()}
        async with in_background(
            _tail_forever(settings, by_topic), name="retrier-dlq-index"
        ) as task:
            task.add_done_callback(_report_stop)
            yield indexes


def _report_stop(task: asyncio.Task[None]) -> None:
    """Say at once when the task ends other than by cancellation (the exception also surfaces
    when the block exits); the indexes then stay as they are while the retrier goes on."""
    if not task.cancelled() and task.exception() is not None:
        log.error("dlq_index_stopped", error=repr(task.exception()))


async def _tail_forever(settings: KafkaSettings, indexes: Mapping[str, DeadLetterIndex]) -> None:
    """Tail the DLQs; after a Kafka error, warn, wait (doubling up to RETRY_MAX_S) and go on."""
    pause_s = RETRY_FIRST_S
    while True:
        tail = _Tail(indexes)
        try:
            async with open_consumer(
                settings,
                group_id=None,
                metadata_max_age_ms=int(DISCOVER_EVERY_S * 1000),
                max_partition_fetch_bytes=_FETCH_PARTITION_BYTES,
            ) as reader:
                await tail.run(reader)
        except _NewTopic:
            await asyncio.sleep(RETRY_FIRST_S)  # a topic just created may lack partitions a moment
        except HifiError as exc:
            if tail.indexed:  # it read letters since the last failure: start the pauses over
                pause_s = RETRY_FIRST_S
            log.warning("dlq_index_read_failed", error=str(exc), retry_in_s=pause_s)
            await asyncio.sleep(pause_s)
            pause_s = min(RETRY_MAX_S, pause_s * 2)


class _NewTopic(Exception):
    """A DLQ was created after the consumer started: its metadata lacks it, a new one has it."""


class _Tail:
    """One reading of the DLQs by one consumer, resuming after what the indexes hold.

    An index is ready once each partition its DLQ had when first seen is read up to the end the
    first fetch response gave for it (the broker's end-offset answer is not trusted: some
    brokers answer short of the end).
    """

    def __init__(self, indexes: Mapping[str, DeadLetterIndex]) -> None:
        self._indexes = indexes
        self._assigned: set[TopicPartition] = set()
        self._begins: dict[TopicPartition, int] = {}
        self._ends: dict[TopicPartition, int | None] = {}  # to reach before ready (None: unknown)
        self._behind: set[TopicPartition] = set()  # partitions that have not reached their end
        self._discovered = False
        self.indexed = 0

    async def run(self, reader: Consumer) -> None:
        loop = asyncio.get_running_loop()
        next_discovery = loop.time()
        while True:
            if loop.time() >= next_discovery:
                await self._discover(reader)
                next_discovery = loop.time() + DISCOVER_EVERY_S
            if not self._assigned:
                await asyncio.sleep(DISCOVER_EVERY_S)
                continue
            fetched = await reader.getmany(timeout_ms=_FETCH_WAIT_MS, max_records=_FETCH_RECORDS)
            for tp, records in fetched.items():
                self.indexed += self._indexes[tp.topic].add(records)
            await asyncio.sleep(0)  # a fetch served from the prefetch does not let others run
            if self._behind:
                await self._note_progress(reader)

    async def _discover(self, reader: Consumer) -> None:
        """Assign every partition of the DLQs, new ones from their beginning, the others from
        the letter after the last indexed."""
        existing = await reader.topics()
        found = {tp for topic in self._indexes for tp in reader.partitions(topic)}
        if any(topic in existing for topic in self._indexes.keys() - {tp.topic for tp in found}):
            raise _NewTopic
        if found != self._assigned:
            reader.assign(found)
            for tp in found:
                after = self._indexes[tp.topic].next_offsets().get(tp.partition)
                if after is None:
                    await reader.seek_to_beginning(tp)
                else:
                    reader.seek(tp, after)
            self._assigned = found
        if not self._discovered:
            self._discovered = True
            waiting = {tp for tp in found if not self._indexes[tp.topic].ready.is_set()}
            self._begins = await reader.beginning_offsets(waiting) if waiting else {}
            self._ends = dict.fromkeys(waiting)
            self._behind = waiting
            await self._note_progress(reader)

    async def _note_progress(self, reader: Consumer) -> None:
        """Learn the ends from the fetch responses; set `expected` once all of an index's are
        known and `ready` once its partitions all reached them."""
        for tp in list(self._behind):
            end = self._ends[tp]
            if end is None:
                end = self._ends[tp] = _fetched_end(reader, tp)
            if end is not None and await reader.position(tp) >= end:
                self._behind.discard(tp)
        for topic, index in self._indexes.items():
            if index.ready.is_set():
                continue
            if index.expected is None:
                index.expected = self._expected(topic)
            if not any(tp.topic == topic for tp in self._behind):
                index.ready.set()
                log.info("dlq_index_ready", topic=topic, letters=len(index))

    def _expected(self, topic: str) -> int | None:
        """Letters in `topic` when first seen; None while an end is unknown."""
        total = 0
        for tp, end in self._ends.items():
            if tp.topic == topic:
                if end is None:
                    return None
                total += max(0, end - self._begins.get(tp, 0))
        return total


def _fetched_end(reader: Consumer, tp: TopicPartition) -> int | None:
    """The partition's end in the last fetch response: its last stable offset, else its
    high watermark (None before a response)."""
    stable = reader.last_stable_offset(tp)
    return stable if stable is not None and stable >= 0 else reader.highwater(tp)
