"""Held tier partitions: paused at a record that is not due, rewound to it, resumed by a timer at its due time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

# A held partition stays paused at least this long, so a stream of events due a few milliseconds
# apart is re-offered in batches instead of re-fetching the partition for every event.
MIN_HOLD_S = 0.1


@dataclass(frozen=True, slots=True)
class Head:
    """The first not-yet-due record of a held tier partition."""

    dest: str
    tier: int
    offset: int
    due_ms: int
    first_failure_ms: int


class Holds:
    """At most one head per tier partition; nothing behind a head is kept in memory.

    `hold` rewinds the partition to the head and pauses it; when the head's due time comes the
    hold ends and `on_due` runs, so the owner can resume the partition and fetch the head again.
    Every timer is referenced here and cancelled by `drop` or `clear`.
    """

    def __init__(self, on_due: Callable[[TopicPartition], None]) -> None:
        self._on_due = on_due
        self._heads: dict[TopicPartition, Head] = {}
        self._timers: dict[TopicPartition, asyncio.TimerHandle] = {}

    def hold(self, consumer: AIOKafkaConsumer, tp: TopicPartition, head: Head, now_ms: int) -> None:
        """Rewind `tp` to the head, pause it and schedule its resumption at the head's due time."""
        consumer.seek(tp, head.offset)
        consumer.pause(tp)
        self._cancel(tp)
        self._heads[tp] = head
        delay_s = max(MIN_HOLD_S, (head.due_ms - now_ms) / 1000)
        loop = asyncio.get_running_loop()
        self._timers[tp] = loop.call_later(delay_s, self._expire, tp)

    def head(self, tp: TopicPartition) -> Head | None:
        return self._heads.get(tp)

    def heads(self) -> Iterator[Head]:
        return iter(list(self._heads.values()))

    def __contains__(self, tp: object) -> bool:
        return tp in self._heads

    def __len__(self) -> int:
        return len(self._heads)

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Forget holds on partitions this member no longer owns (their timers never fire)."""
        for tp in partitions:
            self._cancel(tp)
            self._heads.pop(tp, None)

    def clear(self) -> None:
        self.drop(list(self._heads))

    def _cancel(self, tp: TopicPartition) -> None:
        timer = self._timers.pop(tp, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, tp: TopicPartition) -> None:
        self._timers.pop(tp, None)
        if self._heads.pop(tp, None) is not None:
            self._on_due(tp)
