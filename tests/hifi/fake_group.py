"""A consumer-group member in memory (`hifi.worker.seams.GroupConsumer`), so the worker runs without a broker.

The test owns the partitions' logs, decides the member's assignment and when a rebalance
happens; the fake keeps what aiokafka keeps for the worker: positions, pauses, high watermarks
and committed offsets, and it runs a rebalance inside a poll as aiokafka's eager protocol does
(every owned partition revoked, the callback awaited, then the new assignment, read from the
committed offsets). A test can delete and create the topic again (`recreate`): a position
beyond the new end then fetches nothing, as on Tansu, or with `resets_out_of_range` starts
again at 0, as aiokafka does after Kafka's OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from hifi.worker.seams import GroupConsumer


@dataclass(frozen=True, slots=True)
class FakeRecord:
    topic: str
    partition: int
    offset: int
    value: bytes


class FakeGroup:
    """One member's view of a group over in-memory partitions."""

    def __init__(self, topic: str, partitions: int, *, assign_at_join: bool = True) -> None:
        self.topic = topic
        self.logs = {TopicPartition(topic, p): 0 for p in range(partitions)}  # tp: record count
        self.committed: dict[TopicPartition, int] = {}
        self.commits: list[dict[TopicPartition, int]] = []  # every commit, in order
        self.opened = self.closed = 0
        self._assign_at_join = assign_at_join
        self._owned: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._position: dict[TopicPartition, int] = {}
        self._seen: set[TopicPartition] = set()  # fetched at least once: high watermark known
        self._pending: set[TopicPartition] | None = None  # the next assignment, once polled
        self._rebalanced: asyncio.Future[None] | None = None
        self._on_assigned: Callable[[set[TopicPartition]], None] | None = None
        self._on_revoked: Callable[[set[TopicPartition]], Awaitable[None]] | None = None
        self._wake = asyncio.Event()
        self.resets_out_of_range = False  # True: as Kafka with auto_offset_reset=earliest
        self.incarnation = {tp: 0 for tp in self.logs}  # in each record's value: which topic
        self.stale_highwater: dict[TopicPartition, int] = {}  # a lagging leader's, until removed
        self.end_questions = 0  # end_offsets calls
        self.listener_failures = 0  # assignments whose callback raised
        self.session_timeout_s = 10.0
        self.silent_since: float | None = None  # the coordinator's last answer, while cut off
        self.commits_held = asyncio.Event()  # set: a commit waits until it is cleared (a cut)
        self.commits_waiting = 0
        self.rejoins = 0  # rejoin() calls
        self._rejoining: asyncio.Future[None] | None = None
        self.holes: dict[TopicPartition, set[int]] = {}  # offsets with no record (compaction)
        self._left_out: dict[TopicPartition, range] = {}  # the next fetch over them skips them

    # --- what the test does ---

    def append(self, partition: int, count: int) -> None:
        self.logs[TopicPartition(self.topic, partition)] += count
        self._wake.set()

    def leave_out_once(self, partition: int, offsets: range) -> None:
        """The next fetch that covers `offsets` answers without them, and the ones after them
        (a broker's fetch that leaves a record batch out); later fetches have them."""
        self._left_out[TopicPartition(self.topic, partition)] = offsets

    def recreate(self, partition: int, count: int) -> None:
        """The topic deleted and created again: the partition holds `count` new records from
        offset 0, and its committed offset is gone with the old topic."""
        tp = TopicPartition(self.topic, partition)
        self.logs[tp] = count
        self.incarnation[tp] += 1
        self.committed.pop(tp, None)
        self._wake.set()

    def rebalance(self, partitions: Iterable[int]) -> asyncio.Future[None]:
        """Assign these partitions at the next poll; the future is done once the member has them."""
        self._pending = {TopicPartition(self.topic, p) for p in partitions}
        self._rebalanced = asyncio.get_running_loop().create_future()
        self._wake.set()
        return self._rebalanced

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[GroupConsumer]:
        """The `ConsumerOpener` to give the worker."""
        self.opened += 1
        try:
            yield self
        finally:
            self.closed += 1

    # --- GroupConsumer ---

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assigned: Callable[[set[TopicPartition]], None] | None = None,
        on_revoked: Callable[[set[TopicPartition]], Awaitable[None]] | None = None,
    ) -> None:
        assert list(topics) == [self.topic]
        self._on_assigned, self._on_revoked = on_assigned, on_revoked
        if self._assign_at_join:
            self.rebalance(range(len(self.logs)))

    def assignment(self) -> set[TopicPartition]:
        return set(self._owned)

    async def getmany(
        self, *, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        if self._pending is not None:
            await self._run_rebalance()
            return {}
        fetched = self._fetch(max_records or 500)
        if not fetched:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout_ms / 1000)
        return fetched

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        assert set(offsets) <= self._owned, "commit for a partition the member does not own"
        self.commits_waiting += 1
        while self.commits_held.is_set():
            await asyncio.sleep(0.01)
        self.commits_waiting -= 1
        self.committed.update(offsets)
        self.commits.append(dict(offsets))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._position[tp] = offset

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused |= set(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused -= set(partitions)
        self._wake.set()

    def last_heard_s(self) -> float:
        return time.monotonic() if self.silent_since is None else self.silent_since

    def rejoin(self) -> None:
        """As Tansu after a cut (it expires no session): the same partitions, assigned anew, by
        the coordinator's task (as aiokafka's, whether or not the member polls)."""
        self.rejoins += 1
        self.rebalance([tp.partition for tp in self._owned])
        self._rejoining = asyncio.ensure_future(self._run_rebalance())

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def highwater(self, tp: TopicPartition) -> int | None:
        if tp not in self._seen:
            return None
        return self.stale_highwater.get(tp, self.logs[tp])

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        self.end_questions += 1
        return {tp: self.logs[tp] for tp in partitions}

    async def committed_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return {tp: self.committed.get(tp, 0) for tp in partitions}

    # --- inside ---

    def _fetch(self, max_records: int) -> dict[TopicPartition, list[Any]]:
        fetched: dict[TopicPartition, list[Any]] = {}
        for tp in sorted(self._owned - self._paused):
            self._seen.add(tp)
            start = self._position[tp]
            if start > self.logs[tp] and self.resets_out_of_range:
                start = 0
            end = min(self.logs[tp], start + max_records)
            if end > start:
                topic = self.incarnation[tp]
                skipped = self.holes.get(tp, set())
                left_out = self._left_out.get(tp)
                if left_out is not None and start <= left_out.start < end:
                    skipped = skipped | set(left_out)
                    del self._left_out[tp]
                fetched[tp] = [
                    FakeRecord(tp.topic, tp.partition, n, b'{"n":%d,"topic":%d}' % (n, topic))
                    for n in range(start, end)
                    if n not in skipped
                ]
                self._position[tp] = end
                max_records -= end - start
            if max_records <= 0:
                break
        return fetched

    async def _run_rebalance(self) -> None:
        assert self._pending is not None
        assert self._rebalanced is not None
        new, done = self._pending, self._rebalanced
        self._pending = None
        if self._owned and self._on_revoked is not None:
            await self._on_revoked(set(self._owned))
        self._owned = new
        self._paused &= new
        self._position = {tp: self.committed.get(tp, 0) for tp in new}
        if self._on_assigned is not None:
            try:
                self._on_assigned(set(new))
            except Exception:  # as aiokafka does: the listener's failure logged, the member on
                self.listener_failures += 1
        done.set_result(None)
