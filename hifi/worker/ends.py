"""What the lag of an owned partition is measured between, true while the partition is paused:
its end, and the group's committed offset.

aiokafka learns a partition's high watermark from fetch responses only, and leaves a paused
partition out of its fetch requests: while producers go on writing to it, its high watermark
stays where the last fetch left it. Paused is what a connector's partitions are while its
breaker is open or it has no room, a retrier's tier partition while it holds an event: their
lag (`PartitionHandler.after_commit`, the `*_consumer_lag_records` gauges) would freeze just
when it grows. So every `every_s` one task asks the leaders for the ends of the owned
partitions paused then (ListOffsets); a partition's end is the greater of that answer and the
last fetch's high watermark, and an answer is forgotten once the partition is fetched again.

Tansu 0.6 answers ListOffsets "latest" with the base offset of the partition's last batch plus
one (`connector/backfill/positions.py`): on Tansu a paused partition's end counts its last batch as one
record until the partition is fetched again. Kafka answers the end exactly.

The lag counts from what this member committed; before its first commit of a partition (just
assigned, or paused since), from the group's committed offset, asked once by the same task.
Either question unanswered costs one log line until it is answered again, never the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

from aiokafka import TopicPartition

from hifi.errors import HifiError
from hifi.offsets import OffsetTracker
from hifi.worker.seams import GroupConsumer

QUERY_TIMEOUT_S = 5.0  # a question unanswered this long is asked again next time


class Ends:
    """Per owned partition of one run: its end and the offset its lag counts from."""

    def __init__(
        self, consumer: GroupConsumer, tracker: OffsetTracker, log: Any, *, every_s: float
    ) -> None:
        self._consumer = consumer
        self._tracker = tracker
        self._log = log
        self._every_s = every_s
        self._asked: dict[TopicPartition, int] = {}  # ends of paused partitions, from the leaders
        self._group_committed: dict[TopicPartition, int] = {}  # before this member's first commit
        self._epoch = 0  # advanced by `forget`: answers asked before it are dropped
        self._unanswered = False

    def end(self, tp: TopicPartition) -> int | None:
        """The end of owned `tp`: the last fetch's high watermark, or the leader's later answer
        while it is paused; None before either."""
        highwater = self._consumer.highwater(tp)
        asked = self._asked.get(tp)
        if asked is None or (highwater is not None and highwater >= asked):
            return highwater
        return asked

    def lag_records(self, owned: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Per owned partition whose end and committed offset are known: end minus committed."""
        lag = {}
        for tp in owned:
            end = self.end(tp)
            committed = self._tracker.last_committed(tp)
            if committed is None:
                committed = self._group_committed.get(tp)
            if end is not None and committed is not None:
                lag[tp] = max(0, end - committed)
        return lag

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Assigned or revoked: what was asked of them belongs to the last assignment."""
        self._epoch += 1
        for tp in partitions:
            self._asked.pop(tp, None)
            self._group_committed.pop(tp, None)

    async def refresh(self) -> None:
        """Ask the ends of the owned partitions paused now, and the group's committed offsets
        of those this member has not committed yet (once per assignment)."""
        consumer, tracker, epoch = self._consumer, self._tracker, self._epoch
        owned = consumer.assignment()
        paused = sorted(consumer.paused() & owned)
        for tp in self._asked.keys() - set(paused):
            del self._asked[tp]  # fetched again: its high watermark is current
        unknown = sorted(
            tp
            for tp in owned
            if tracker.last_committed(tp) is None and tp not in self._group_committed
        )
        try:
            async with asyncio.timeout(QUERY_TIMEOUT_S):
                ends = await consumer.end_offsets(paused) if paused else {}
                committed = await consumer.committed_offsets(unknown) if unknown else {}
        except (HifiError, TimeoutError) as exc:
            if not self._unanswered:
                self._unanswered = True
                self._log.info("paused_ends_unknown", error=str(exc) or "timeout")
            return
        self._unanswered = False
        if epoch != self._epoch:
            return  # a rebalance ran meanwhile: ask again next time
        owned, paused_now = consumer.assignment(), consumer.paused()
        self._asked.update((tp, end) for tp, end in ends.items() if tp in paused_now)
        self._group_committed.update((tp, n) for tp, n in committed.items() if tp in owned)

    @contextlib.asynccontextmanager
    async def refreshing(self) -> AsyncIterator[None]:
        """`refresh()` every `every_s` in one task, cancelled when the block exits."""
        task = asyncio.create_task(self._refresh_forever(), name="worker-ends")
        task.add_done_callback(self._ended)
        try:
            yield
        finally:
            task.cancel()
            await asyncio.wait([task])

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            await self.refresh()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._log.error("paused_ends_failed", error=repr(exc))
