"""A test handler for the shared consumer lifecycle (`PartitionWorker`), with the broker or a fake.

Every unit of work of `Units` is one record whose coroutine waits for its own `asyncio.Event`,
so a test decides exactly which records are in flight, which finish, in which order, and
which raise. The tests wait on those events and on the handler's callbacks, never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from hifi.worker import PartitionHandler, PartitionWorker, Work, WorkerOptions

WAIT_S = 30.0  # bound on anything the broker has to do (group joins, rebalances, fetches)
# Fast failure detection, so that a member joining is noticed within a fraction of a second.
# Short fetch waits (as the connector's), so records produced are taken at once.
FAST_GROUP = {"heartbeat_interval_ms": 100, "session_timeout_ms": 6000, "fetch_max_wait_ms": 20}


class Changes:
    """Wakes every waiter whenever the handler or a unit changes state."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def until(
        self, condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S
    ) -> None:
        """Return once `condition()` holds; fail the test naming `what` after `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                while not condition():
                    await self._event.wait()
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}") from None


class Boom(Exception):
    """The failure a unit of work raises when told to."""


@dataclass(eq=False)
class Unit:
    """One record's work: starts, waits until released, then finishes (or raises `error`)."""

    tp: TopicPartition
    offset: int
    changes: Changes = field(repr=False)
    release: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    error: BaseException | None = None
    value: bytes = b""
    started: bool = False
    finished: bool = False
    cancelled: bool = False
    dropped: bool = False

    async def job(self) -> None:
        self.started = True
        self.changes.notify()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            self.changes.notify()
            raise
        if self.error is not None:
            self.changes.notify()
            raise self.error
        self.finished = True
        self.changes.notify()


class Units(PartitionHandler):
    """A handler that makes one held `Unit` per record and records every call the worker makes."""

    def __init__(
        self, *, auto_release: bool = False, start: bool = True, changes: Changes | None = None
    ) -> None:
        self.auto_release = auto_release
        self.start = start  # False: start nothing until a test sets it (and wakes the worker)
        self.changes = changes or Changes()  # share one to wait on several handlers
        self.units: list[Unit] = []  # every unit ever made, in take order
        self.pending: dict[TopicPartition, deque[Unit]] = {}  # not started, per partition
        self.room_left = 500
        self.room_calls = 0
        self.drops: list[set[TopicPartition]] = []
        self.commits: list[dict[TopicPartition, int]] = []  # lag_records of each after_commit
        self.started_over_calls: list[TopicPartition] = []

    # --- PartitionHandler ---

    def take(self, tp: TopicPartition, records: list[Any]) -> None:
        for record in records:
            unit = Unit(tp, record.offset, self.changes, value=record.value)
            if self.auto_release:
                unit.release.set()
            self.units.append(unit)
            self.pending.setdefault(tp, deque()).append(unit)
        self.changes.notify()

    def next_work(self, *, poll_open: bool) -> Work | None:
        """Round robin over the partitions, so that every partition has work in flight."""
        if not self.start:
            return None
        for tp in list(self.pending):
            queue = self.pending.pop(tp)
            if queue:
                unit = queue.popleft()
                self.pending[tp] = queue  # to the back of the round
                return Work(job=unit.job(), offsets={unit.tp: [unit.offset]})
        return None

    def room(self) -> int:
        self.room_calls += 1
        self.changes.notify()
        return self.room_left

    @property
    def busy(self) -> bool:
        return any(self.pending.values())

    def drop(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            for unit in self.pending.pop(tp, ()):
                unit.dropped = True
        self.drops.append(set(partitions))
        self.changes.notify()

    def after_commit(self, lag_records: Mapping[TopicPartition, int]) -> None:
        self.commits.append(dict(lag_records))
        self.changes.notify()

    def started_over(self, tp: TopicPartition) -> None:
        self.started_over_calls.append(tp)
        self.changes.notify()

    # --- for the tests ---

    def taken(self) -> list[tuple[int, int]]:
        """(partition, offset) of every record taken, in order, repeats kept."""
        return [(unit.tp.partition, unit.offset) for unit in self.units]

    def unit(self, offset: int, partition: int = 0) -> Unit:
        """The latest unit made for a record."""
        for unit in reversed(self.units):
            if (unit.tp.partition, unit.offset) == (partition, offset):
                return unit
        raise AssertionError(f"record {partition}/{offset} was never taken")

    def started(self) -> list[tuple[int, int]]:
        return [(u.tp.partition, u.offset) for u in self.units if u.started]

    def release_all(self) -> None:
        self.auto_release = True
        for unit in self.units:
            unit.release.set()


def options(group: str, **overrides: Any) -> WorkerOptions:
    """Options for a test worker: commits only when a test needs them, a generous drain deadline."""
    settings: dict[str, Any] = {
        "group_id": group,
        "max_in_flight": 4,
        "commit_interval_s": 60.0,
        "shutdown_timeout_s": 20.0,
        "consumer_options": FAST_GROUP,
    }
    settings.update(overrides)
    return WorkerOptions(**settings)


@contextlib.asynccontextmanager
async def running(
    worker: PartitionWorker, handler: Units, topics: Sequence[str]
) -> AsyncIterator[asyncio.Task[None]]:
    """Run the worker as a task; on the way out stop it, release its work and wait for it."""
    task = asyncio.create_task(worker.run(handler, topics=topics))
    try:
        yield task
    finally:
        if not task.done():
            worker.request_stop()
            handler.release_all()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, WAIT_S)
        if not task.done():
            task.cancel()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await task  # a failure the test did not check for is not this helper's to report


async def not_done_within(task: asyncio.Task[None], seconds: float) -> bool:
    """True if `task` is still running after `seconds` (it is not cancelled by the wait)."""
    done, _ = await asyncio.wait([task], timeout=seconds)
    return not done


async def stop_mid_work(worker: PartitionWorker, handler: Units, topic: str) -> None:
    """Five records of one partition, three slots: stop while 1, 2 and 3 run (0 finished); 1
    finishes within the drain deadline, 2 and 3 are cancelled at it, 4 is dropped unstarted."""
    handler.start = False
    async with running(worker, handler, [topic]) as task:
        await handler.changes.until(lambda: len(handler.units) == 5, "five records taken")
        handler.start = True
        worker.wake()
        await handler.changes.until(lambda: len(handler.started()) == 3, "three units running")
        handler.unit(0).release.set()
        await handler.changes.until(lambda: len(handler.started()) == 4, "a fourth to start")
        worker.request_stop()
        await handler.changes.until(lambda: bool(handler.drops), "the stop to drop work")
        assert not task.done()
        handler.unit(1).release.set()  # finishes within the deadline; 2 and 3 never do
        await asyncio.wait_for(task, WAIT_S)
        assert task.result() is None
    assert [(u.offset, u.finished, u.cancelled, u.started) for u in handler.units] == [
        (0, True, False, True),
        (1, True, False, True),
        (2, False, True, True),
        (3, False, True, True),
        (4, False, False, False),  # dropped: never started
    ]


async def finish_out_of_order(
    worker: PartitionWorker,
    handler: Units,
    topic: str,
    committed: Callable[[], Awaitable[int | None]],
) -> None:
    """Five records of partition 0 running at once, finished 1, 3, 4, then 0, then 2: two
    commits after each step, `committed()` is None, 2, then 5 (the first unfinished record
    bounds it), and after the second step the handler is told a lag of 3."""

    async def committed_after_two_commits() -> int | None:
        seen = len(handler.commits)
        await handler.changes.until(lambda: len(handler.commits) >= seen + 2, "two commits")
        return await committed()

    async with running(worker, handler, [topic]):
        await handler.changes.until(lambda: len(handler.started()) == 5, "five units running")
        for offset in (1, 3, 4):
            handler.unit(offset).release.set()
        await handler.changes.until(
            lambda: all(handler.unit(o).finished for o in (1, 3, 4)), "1, 3 and 4 to finish"
        )
        assert await committed_after_two_commits() is None  # 0 is unfinished
        handler.unit(0).release.set()
        await handler.changes.until(lambda: handler.unit(0).finished, "0 to finish")
        assert await committed_after_two_commits() == 2  # 2 is unfinished
        # lag: high watermark 5 minus committed 2
        assert handler.commits[-1] == {TopicPartition(topic, 0): 3}
        handler.unit(2).release.set()
        await handler.changes.until(lambda: handler.unit(2).finished, "2 to finish")
        assert await committed_after_two_commits() == 5
