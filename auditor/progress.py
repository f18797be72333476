"""The auditor's progress clock: how far in time it has read each partition it consumes.

A minute settles when the auditor has read everything written up to `settle_s` after it, not
when the wall clock says so: after an outage it catches up from Kafka and settles the minutes
it missed in order, with the same counts as if it had never stopped. A partition read to its
high watermark is at "now"; one with a backlog is at the Kafka timestamp of the last record
read from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

# A partition owned this long without a record and without a known high watermark (an empty
# partition the fetcher has not answered for) is taken as read to its end.
UNTOUCHED_GRACE_MS = 10_000


@dataclass(slots=True)
class _Read:
    owned_since_ms: int
    next_offset: int | None = None  # the offset after the last record read
    last_record_ms: int | None = None  # the Kafka timestamp of the last record read


class ProgressClock:
    """Per partition: the time up to which everything written has been read."""

    def __init__(
        self,
        highwater: Callable[[TopicPartition], int | None],
        now_ms: Callable[[], int],
    ) -> None:
        self._highwater = highwater
        self._now_ms = now_ms
        self._reads: dict[TopicPartition, _Read] = {}
        self._owned: set[TopicPartition] = set()

    def owned(self, partitions: set[TopicPartition]) -> None:
        """The partitions this member owns now."""
        now = self._now_ms()
        for tp in partitions - self._owned:
            read = self._reads.get(tp)
            if read is None:
                self._reads[tp] = _Read(now)
            else:
                read.owned_since_ms = now
        self._owned = set(partitions)

    def read(self, tp: TopicPartition, next_offset: int, last_record_ms: int) -> None:
        read = self._reads.get(tp)
        if read is None:
            read = self._reads[tp] = _Read(self._now_ms())
        read.next_offset = next_offset
        if read.last_record_ms is None or last_record_ms > read.last_record_ms:
            read.last_record_ms = last_record_ms

    def position(self, tp: TopicPartition) -> tuple[int, int | None] | None:
        """How far `tp` was read: the next offset and the last record's Kafka time; None if unread."""
        read = self._reads.get(tp)
        if read is None or read.next_offset is None:
            return None
        return read.next_offset, read.last_record_ms

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._highwater(tp)

    def seek(self, tp: TopicPartition, next_offset: int) -> None:
        """The member reads `tp` again from `next_offset` (after a rebalance): everything before
        it is taken in, so a partition whose end is there is read to its end at once; the Kafka
        time of what follows is read again."""
        self._reads[tp] = _Read(self._now_ms(), next_offset)

    def restart(self, tp: TopicPartition) -> None:
        """`tp` was created again: forget how far its previous incarnation was read."""
        read = self._reads.get(tp)
        if read is not None:
            read.next_offset = read.last_record_ms = None

    def at(self, topics: Iterable[str]) -> int:
        """The progress of the owned partitions of `topics`: the least of theirs (now if none of
        them is owned while others are: a source topic that does not exist)."""
        if not self._owned:
            return 0  # before the first assignment, or between two: nothing read, nothing settles
        now = self._now_ms()
        wanted = set(topics)
        least = now
        for tp in self._owned:
            if tp.topic in wanted:
                least = min(least, self._partition_ms(tp, now))
        return least

    def of(self, partitions: Iterable[TopicPartition]) -> int:
        """The progress of some owned partitions (a share's source partition and the audit
        topic's): the least of theirs; 0 before they are owned."""
        now = self._now_ms()
        owned = [tp for tp in partitions if tp in self._owned]
        return min((self._partition_ms(tp, now) for tp in owned), default=0)

    def _partition_ms(self, tp: TopicPartition, now: int) -> int:
        read = self._reads[tp]
        highwater = self._highwater(tp)
        # read to its end (or empty) is now; an end below what was read is a topic created
        # again whose records are not read yet (`auditor.epochs`): held at the last record read
        if highwater is not None and (
            highwater == 0 or (read.next_offset is not None and read.next_offset == highwater)
        ):
            return now
        if read.next_offset is None:
            # Never read a record: no answer yet for an empty partition, or nothing new since
            # the last commit and no snapshot to say where that was.
            untouched_ms = now - read.owned_since_ms
            grace_ms = UNTOUCHED_GRACE_MS if highwater is None else 3 * UNTOUCHED_GRACE_MS
            if untouched_ms >= grace_ms:
                return now
        if read.last_record_ms is None:
            return 0  # nothing read yet: no minute can settle on this partition's account
        return read.last_record_ms

    def state(self, only: TopicPartition | None = None) -> list[list[Any]]:
        """What a snapshot keeps: how far each partition was read, or only `only` (a share's)."""
        return [
            [tp.topic, tp.partition, r.next_offset, r.last_record_ms]
            for tp, r in self._reads.items()
            if r.next_offset is not None and (only is None or tp == only)
        ]

    def restore(self, state: Iterable[list[Any]]) -> None:
        now = self._now_ms()
        for topic, partition, next_offset, last_record_ms in state:
            self._reads[TopicPartition(str(topic), int(partition))] = _Read(
                now, int(next_offset), None if last_record_ms is None else int(last_record_ms)
            )

    def lag_records(self) -> Mapping[TopicPartition, int]:
        """High watermark minus the next offset to read, per owned partition known."""
        lag = {}
        for tp in self._owned:
            read, highwater = self._reads.get(tp), self._highwater(tp)
            if read is not None and read.next_offset is not None and highwater is not None:
                lag[tp] = max(0, highwater - read.next_offset)
        return lag
