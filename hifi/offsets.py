"""Commit watermarks: per partition, the highest offset below which every record has an outcome."""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from aiokafka import TopicPartition


@dataclass
class _PartitionProgress:
    outstanding: deque[int] = field(default_factory=deque)  # offsets in fetch order
    done: set[int] = field(default_factory=set)  # finished, not yet at the head
    next_offset: int | None = None  # offset to commit
    committed: int | None = None  # last offset committed


class OffsetTracker:
    """Tracks fetched records until each has an outcome, even when they finish out of order.

    Offsets within a partition arrive in increasing order but need not be contiguous (compaction,
    transaction markers), so the watermark follows the fetch order, not arithmetic.
    """

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, _PartitionProgress] = {}
        self.finished_since_commit = 0  # outcomes noted since the last `committed()` call

    def track(self, tp: TopicPartition, offsets: Iterable[int]) -> None:
        """Note fetched records of one partition, in fetch order, that have no outcome yet."""
        progress = self._partitions.get(tp)
        if progress is None:
            progress = self._partitions[tp] = _PartitionProgress()
        progress.outstanding.extend(offsets)

    def finish(self, tp: TopicPartition, offsets: Collection[int]) -> None:
        """Note that records of one partition have their outcome; unknown (revoked) ones are ignored."""
        progress = self._partitions.get(tp)
        if progress is None:
            return
        done, queue = progress.done, progress.outstanding
        done.update(offsets)
        self.finished_since_commit += len(offsets)
        head = None
        while queue and queue[0] in done:
            head = queue.popleft()
            done.discard(head)
        if head is not None:
            progress.next_offset = head + 1
        if not done:
            # a set keeps the table of the most it ever held: without this, a partition that
            # goes quiet after a backlog keeps megabytes for every offset it once had in flight
            done.clear()

    def outstanding(self, tp: TopicPartition) -> int:
        progress = self._partitions.get(tp)
        return len(progress.outstanding) if progress else 0

    def total_outstanding(self) -> int:
        return sum(len(p.outstanding) for p in self._partitions.values())

    def to_commit(self, partitions: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Offsets that advanced since the last `committed()` call."""
        return {
            tp: p.next_offset
            for tp, p in self._partitions.items()
            if p.next_offset is not None
            and p.next_offset != p.committed
            and (partitions is None or tp in partitions)
        }

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        self.finished_since_commit = 0
        for tp, offset in offsets.items():
            progress = self._partitions.get(tp)
            if progress is not None:
                progress.committed = offset

    def last_committed(self, tp: TopicPartition) -> int | None:
        progress = self._partitions.get(tp)
        return progress.committed if progress else None

    def restart(self, tp: TopicPartition, from_offset: int) -> None:
        """`tp` started over (its topic was created again): forget its records and commits, and
        commit `from_offset` next, over whatever the group had committed for the old one."""
        self._partitions[tp] = _PartitionProgress(next_offset=from_offset)

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Drop state for partitions this member no longer owns."""
        for tp in partitions:
            self._partitions.pop(tp, None)
