"""Held tier partitions: paused at their first record that is not due, until a timer ends the hold at its due time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from aiokafka import TopicPartition

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

    The owner pauses a held partition and reads it again from the head; when the head's due time
    comes the hold ends and `on_due` runs, so the owner resumes the partition. Every timer is
    referenced here and cancelled by `drop`.
    """

    def __init__(self, on_due: Callable[[], None]) -> None:
        self._on_due = on_due
        self._heads: dict[TopicPartition, Head] = {}
        self._timers: dict[TopicPartition, asyncio.TimerHandle] = {}

    def hold(self, tp: TopicPartition, head: Head, now_ms: int) -> None:
        """Hold `tp` at `head` until the head's due time."""
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

    def partitions(self) -> set[TopicPartition]:
        return set(self._heads)

    def __len__(self) -> int:
        return len(self._heads)

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Forget holds on partitions this member no longer owns (their timers never fire)."""
        for tp in partitions:
            self._cancel(tp)
            self._heads.pop(tp, None)

    def _cancel(self, tp: TopicPartition) -> None:
        timer = self._timers.pop(tp, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, tp: TopicPartition) -> None:
        self._timers.pop(tp, None)
        if self._heads.pop(tp, None) is not None:
            self._on_due()
