"""Where a time falls in a partition: the first offset whose record timestamp is at or after it.

Kafka's answer (`offsets_for_times`, ListOffsets by timestamp) is asked first, but some brokers
answer it by write time instead of by the record's own timestamp (Tansu 0.6 answers offset 0
for any time). So every answer is checked by reading the record at the offset returned and the
one before it; when the check fails, a binary search reads single records (seek, then fetch
one) until it finds the first record at or after the time: about log2(records) fetches per
partition.

The end of a partition is checked the same way: Tansu 0.6 answers ListOffsets "latest" with
the base offset of the last batch plus one, so the end is the greater of that answer and the
last stable offset (or high watermark) of a fetch near it.

The search assumes that timestamps rise with offsets within a partition, as producers' clocks
make them (roughly). With records out of time order it finds *a* boundary: a record at or after
the time whose predecessor is before it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from config.destination import FETCH_MAX_WAIT_MS, Destination
from hifi.errors import BrokerUnavailable, UnknownTopic
from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings

_PROBE_WAIT_MS = 200  # one fetch of a probe
_PROBE_FETCHES = 50  # a probe that sees no record in this many fetches fails (10 s)
_MAX_SEARCH_STEPS = 64  # offsets are 63-bit: a halving search ends sooner


@dataclass(frozen=True, slots=True)
class Position:
    """Where a time falls in one partition, and the partition's extent when it was asked."""

    tp: TopicPartition
    offset: int  # the first record at or after the time; `end` when there is none
    begin: int  # the first offset still in the log
    end: int  # the offset the next record will get
    searched: bool  # the broker's answer was wrong (or missing) and a search found `offset`


@contextlib.asynccontextmanager
async def reader(settings: KafkaSettings) -> AsyncIterator[Consumer]:
    """A consumer outside any group, for probes and scans; it never commits."""
    async with open_consumer(
        settings, group_id=None, fetch_max_wait_ms=FETCH_MAX_WAIT_MS
    ) as consumer:
        yield consumer


async def source_partitions(consumer: Consumer, dest: Destination) -> list[TopicPartition]:
    """Every partition of `dest`'s source topics; a topic that does not exist is an error."""
    await consumer.topics()
    found: list[TopicPartition] = []
    for topic in dest.source_topics:
        partitions = consumer.partitions(topic)
        if not partitions:
            raise UnknownTopic(
                f"source topic {topic!r} of destination {dest.name!r} does not exist;"
                " check source_topics in its catalog file"
            )
        found.extend(partitions)
    return found


async def offsets_at(
    consumer: Consumer, partitions: Sequence[TopicPartition], time_ms: int
) -> dict[TopicPartition, Position]:
    """Per partition, the first record whose timestamp is at or after `time_ms` (epoch ms)."""
    if not partitions:
        return {}
    begins = await consumer.beginning_offsets(partitions)
    ends = await consumer.end_offsets(partitions)
    answers = await consumer.offsets_for_times(dict.fromkeys(partitions, time_ms))
    found: dict[TopicPartition, Position] = {}
    for tp in partitions:
        probe = _Probe(consumer, tp, begin=begins[tp], end=ends[tp])
        end = await probe.confirm_end()
        offset = await probe.confirm(answers.get(tp), time_ms)
        searched = offset is None
        if offset is None:
            offset = await probe.search(time_ms)
        found[tp] = Position(tp, offset, begins[tp], end, searched)
    return found


class _Probe:
    """Single-record reads of one partition between `begin` and `end`."""

    def __init__(self, consumer: Consumer, tp: TopicPartition, *, begin: int, end: int):
        self._consumer = consumer
        self._tp = tp
        self._begin = begin
        self._end = end

    async def confirm_end(self) -> int:
        """The partition's end: the broker's answer, or further if a fetch near it says so."""
        if self._end > self._begin:
            await self.record_at(self._end - 1)
            fetched = self._consumer.last_stable_offset(self._tp)
            if fetched is None or fetched < 0:
                fetched = self._consumer.highwater(self._tp)
            self._end = max(self._end, fetched or 0)
        return self._end

    async def confirm(self, answer: int | None, time_ms: int) -> int | None:
        """The broker's answer if the records around it agree; None when they do not."""
        if self._begin >= self._end:
            return self._end  # an empty partition: nothing at or after any time
        if answer is None:  # the broker says every record is before the time: is the last?
            last = await self.record_at(self._end - 1)
            return self._end if last is not None and last.timestamp < time_ms else None
        if not self._begin <= answer < self._end:
            return None
        record = await self.record_at(answer)
        if record is None or record.offset != answer or record.timestamp < time_ms:
            return None
        if answer == self._begin:
            return answer
        before = await self.record_at(answer - 1)
        if before is None or before.offset != answer - 1 or before.timestamp >= time_ms:
            return None  # a gap before the answer (a marker) is not checked: search instead
        return answer

    async def search(self, time_ms: int) -> int:
        """The first record at or after `time_ms` by bisection over offsets, or `end`.

        Invariant: the first record at or after `high` is at or after the time (or there is
        none), and the first record at or after any offset below `low` is before it.
        """
        low, high = self._begin, self._end
        for _ in range(_MAX_SEARCH_STEPS):
            if low >= high:
                break
            middle = (low + high) // 2
            record = await self.record_at(middle)
            if record is None or record.timestamp >= time_ms:
                high = middle
            else:
                low = record.offset + 1  # offsets up to this record all lead to it
        first = await self.record_at(low) if low < self._end else None
        return self._end if first is None else int(first.offset)

    async def record_at(self, offset: int) -> Any | None:
        """The first record at or after `offset` (None when there is none before `end`)."""
        consumer, tp = self._consumer, self._tp
        if consumer.assignment() != {tp}:
            consumer.assign([tp])
        consumer.seek(tp, offset)
        for _ in range(_PROBE_FETCHES):
            fetched = await consumer.getmany(timeout_ms=_PROBE_WAIT_MS, max_records=1)
            records = fetched.get(tp)
            if records:
                return records[0] if records[0].offset < self._end else None
            if await consumer.position(tp) >= self._end:
                return None
        raise BrokerUnavailable(
            f"reading {tp.topic}/{tp.partition} at offset {offset}: no record came back in"
            f" {_PROBE_FETCHES * _PROBE_WAIT_MS / 1000:g} s although the partition ends at"
            f" {self._end}; try again"
        )
