"""The lifecycle every Kafka consumer daemon of hifi shares: poll, take in, spawn, reap, commit, revoke, drain.

A daemon supplies a `PartitionHandler` (`hifi.worker.seams`; the consumer is a seam too, a fake
in tests): what the records of one poll become (`take`), the next unit of work to start
(`next_work`) and, if it needs them, its intake limits and what follows a commit. The
`PartitionWorker` does the rest, the same way for every daemon:

- one loop polls Kafka for only as many records as the handler has room for, lets aiokafka's
  next fetch go out, takes each partition's records in (as the handler's `prepare` gives them:
  decoded, when a destination decodes), then starts work while fewer than
  `max_in_flight` (or a moving `limit()`) units run; each unit is a task it keeps; a finished
  unit's records are done (the commit watermark, `OffsetTracker`, moves past them); the slots
  of the units that ended in one turn of the loop are filled in the next (`dispatch()`); a unit
  that raises stops the worker;
- a unit whose job returns an awaitable (the broker's acknowledgement of its audit facts) gives
  its slot to the next unit and settles beside the running ones; its records are done once that
  awaitable is; at most `max_in_flight` units settle at once;
- offsets are committed every `commit_interval_s`, or sooner after `commit_every_records`
  outcomes, and only up to the first record without an outcome;
- partitions the handler holds, and all while it has no room, are paused; `until_idle_s`:
  after a first assignment, exit once nothing arrived, ran or waited that long;
- revocation: stop starting work for the revoked partitions, wait for theirs within
  `shutdown_timeout_s`, commit, forget them;
- `request_stop()` (SIGTERM): stop polling, let running work finish within the deadline,
  cancel what is left, commit, return; during a rebalance, once it ends (aiokafka leaves the
  group only then), bounded by the other members' `shutdown_timeout_s`;
- a handler's `assigned` that raises stops the worker with it; a topic created again starts
  over (`restarts`); offsets that jump past a record are read again once (`gaps`); the lag
  `after_commit` gets stays true while paused (`ends`); cut from Kafka: no new work (`session`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import structlog
from aiokafka import TopicPartition

from hifi.errors import HifiError
from hifi.kafka.consuming import open_consumer
from hifi.kafka.reach import KafkaReach
from hifi.kafka.settings import KafkaSettings
from hifi.offsets import OffsetTracker
from hifi.ops_http import OpsServer
from hifi.worker.ends import Ends
from hifi.worker.restarts import RestartWatch, StartOvers
from hifi.worker.seams import ConsumerOpener, GroupConsumer, PartitionHandler, Work, WorkerOptions
from hifi.worker.session import GroupSession

__all__ = ["PartitionWorker"]

log = structlog.get_logger(__name__)

_POLL_TIMEOUT_MS = 200
_PAUSED_WAIT_S = 0.5  # with every partition paused: wait this long at most for progress
_FETCH_TURNS = 3  # aiokafka's next fetch leaves three loop turns after a poll empties its buffer
_offset_of = attrgetter("offset")


class PartitionWorker:
    """Runs one consumer-group member; `run()` returns after `request_stop()` or the idle timeout."""

    def __init__(
        self,
        settings: KafkaSettings,
        options: WorkerOptions,
        *,
        ops: OpsServer | None = None,
        consumer: ConsumerOpener | None = None,
        reach: KafkaReach | None = None,
    ) -> None:
        """`consumer`: opens the group member to poll; by default an `open_consumer` of
        `settings` with `options.consumer_options` (tests pass a fake, see `hifi.worker.seams`).
        `reach`: the daemon's, whose producer waits for Kafka too."""
        self.options = options
        self.reach = reach or KafkaReach()
        self._settings = settings
        self._open_consumer = consumer or self._kafka_consumer
        self._ops = ops
        self._stop = asyncio.Event()
        self._progress = asyncio.Event()
        self._member: _Membership | None = None
        self._started_over = StartOvers()

    def request_stop(self) -> None:  # safe to call from a signal handler
        self._stop.set()
        self._progress.set()

    @property
    def stopping(self) -> asyncio.Event:  # set once `request_stop()` was called
        return self._stop

    def highwater(self, tp: TopicPartition) -> int | None:
        """An owned partition's end: its last fetch's or, paused, its leader's (`ends`); or None."""
        member = self._member  # aiokafka asserts on a partition it does not own: ask of owned ones
        return member.ends.end(tp) if member and tp in member.owned else None

    def started_over(self) -> list[dict[str, Any]]:
        """For `/status`: each partition that started over, how often, and the last time's why."""
        return self._started_over.view()

    def wake(self) -> None:
        """Re-read the handler's limits and holds soon (e.g. a held record became due)."""
        self._progress.set()

    async def run(self, handler: PartitionHandler, *, topics: Sequence[str]) -> None:
        """Consume `topics` until stopped; raises the first failure of a unit of work, or of Kafka."""
        options = self.options
        async with self._open_consumer() as consumer:
            member = _Membership(
                options,
                consumer,
                handler,
                stop=self._stop,
                progress=self._progress,
                ops=self._ops,
                seen=self._started_over,
                reach=self.reach,
            )
            consumer.subscribe(topics, on_assigned=member.assigned, on_revoked=member.revoke)
            self._member = member
            try:
                async with member.ends.refreshing(), member.session.watching():
                    await member.poll_until_stopped()
            finally:
                await member.drain()
                self._member = None
        if member.failure is not None:
            raise member.failure

    def _kafka_consumer(self) -> contextlib.AbstractAsyncContextManager[GroupConsumer]:
        options = self.options
        return open_consumer(self._settings, group_id=options.group_id, **options.consumer_options)


class _Membership:
    """The state of one run: the consumer, the watermark, the running tasks."""

    def __init__(
        self,
        options: WorkerOptions,
        consumer: GroupConsumer,
        handler: PartitionHandler,
        *,
        stop: asyncio.Event,
        progress: asyncio.Event,
        ops: OpsServer | None,
        seen: StartOvers,
        reach: KafkaReach,
    ) -> None:
        self.options = options
        self.stop = stop  # set: stop polling and drain
        self.progress = progress  # set: a unit ended, or the handler was woken
        self.ops = ops
        self.consumer = consumer
        self.handler = handler
        self.tracker = OffsetTracker()
        self.tasks: dict[asyncio.Task[None], Work] = {}  # every unit, settling ones included
        self.running: set[asyncio.Task[None]] = set()  # the units holding a slot
        self.failure: BaseException | None = None
        self.epoch = 0  # advanced by every rebalance callback
        self.owned: set[TopicPartition] = set()  # as the rebalance callbacks last said
        self.assigned_once = False
        self.last_busy_s = 0.0  # loop time of the last work, or of the last assignment
        self.poll_open = False
        self.refilling = False  # a `refill` is due on the next turn of the loop
        self.log = log.bind(**self.options.log_context)
        confirm_s = options.started_over_confirm_s
        self.restarts = RestartWatch(consumer, handler, self.tracker, seen, confirm_s, self.log)
        self.ends = Ends(consumer, self.tracker, self.log, every_s=options.ends_every_s)
        self.session = GroupSession(consumer, reach, self.log)

    # --- the loop ---------------------------------------------------------------------
    async def poll_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        options, stop, progress = self.options, self.stop, self.progress
        self.last_busy_s = loop.time()
        next_commit = loop.time() + options.commit_interval_s
        commit_every = options.commit_every_records or float("inf")
        while not stop.is_set() and self.failure is None:
            room = self.sync_pauses()
            fetched: dict[TopicPartition, list[Any]] = {}
            if room == 0 or self.all_paused():
                progress.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(progress.wait(), _PAUSED_WAIT_S)
            else:
                fetched = await self.consumer.getmany(timeout_ms=_POLL_TIMEOUT_MS, max_records=room)
                await self.take_in(fetched)
            self.dispatch()
            await self.restarts.check(loop.time())
            if lost := self.session.check(self.consumer.assignment()):
                self.handler.drop(lost)  # another member may send them now: start none here
            now = loop.time()
            if fetched or self.tasks or self.handler.busy or not self.assigned_once:
                self.last_busy_s = now
            if now >= next_commit or self.tracker.finished_since_commit >= commit_every:
                await self.commit()
                next_commit = now + options.commit_interval_s
            idle_s = now - self.last_busy_s
            if options.until_idle_s is not None and idle_s >= options.until_idle_s:
                self.log.info("idle_exit", idle_s=options.until_idle_s)
                return

    def sync_pauses(self) -> int:
        """Pause what the handler holds (everything while it has no room); resume the rest."""
        owned = self.consumer.assignment()
        room = self.handler.room()
        starting_over = self.restarts.waiting.keys() & owned
        want = owned if room <= 0 else self.handler.held(owned) | starting_over
        want |= self.session.lost & owned
        have = self.consumer.paused()
        if want - have:
            self.consumer.pause(want - have)
        if have - want:
            self.consumer.resume(have - want)
        return max(0, room)

    def all_paused(self) -> bool:
        owned = self.consumer.assignment()
        return bool(owned) and owned <= self.consumer.paused()

    async def take_in(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Take in a poll partition by partition, yielding to the event loop before each one
        (aiokafka fetches, running work reads its replies). A rebalance can run in a yield: the
        rest of the poll is then dropped, as the new assignment fetches from the commits."""
        epoch = self.epoch
        self.poll_open = True
        try:
            for _ in range(_FETCH_TURNS if fetched else 0):  # or the fetch waits for the take-in
                await asyncio.sleep(0)
            for tp, records in fetched.items():
                await asyncio.sleep(0)
                if self.epoch != epoch:
                    return
                if tp in self.session.lost or self.restarts.skip(tp, records[0].offset):
                    continue
                records, again = self.restarts.before_gap(tp, records)  # (hifi.worker.gaps)
                if records:
                    prepared = await self.handler.prepare(tp, records)  # may wait: a schema
                    if self.epoch != epoch:
                        return
                    if prepared is None:  # not now (a source it needs is down): again later
                        self.consumer.seek(tp, records[0].offset)
                        continue
                    records = prepared
                taken = self.handler.take(tp, records) if records else None
                resume = again if taken is None else taken  # the first offset not taken
                if resume is None:
                    self.tracker.track(tp, map(_offset_of, records))
                    self.restarts.took(tp, records[-1].offset + 1)
                    continue
                self.tracker.track(tp, [r.offset for r in records if r.offset < resume])
                self.consumer.seek(tp, resume)
                self.restarts.took(tp, resume)
        finally:
            self.poll_open = False

    # --- bounded work -----------------------------------------------------------------
    def dispatch(self) -> None:
        """The one way work starts: within `max_in_flight` (or `limit()`) and `max_settling`."""
        if self.failure is not None or self.stop.is_set() or self.session.waiting:
            return  # failed, stopping or cut from Kafka: no new work
        handler, tasks, running, options = self.handler, self.tasks, self.running, self.options
        limit = options.max_in_flight if options.limit is None else options.limit()
        limit = max(1, min(limit, options.max_in_flight))
        settling = options.max_in_flight if options.max_settling is None else options.max_settling
        while len(running) < limit and len(tasks) < limit + settling:
            work = handler.next_work(poll_open=self.poll_open)
            if work is None:
                return
            task = asyncio.create_task(self.perform(work))
            tasks[task] = work
            running.add(task)
            task.add_done_callback(self.reap)

    async def perform(self, work: Work) -> None:
        settling = await work.job
        if settling is not None:
            self.give_up_slot()
            await settling
        for tp, offsets in work.offsets.items():
            self.tracker.finish(tp, offsets)

    def give_up_slot(self) -> None:
        """The running unit only waits for its outcome to settle: start the next one."""
        task = asyncio.current_task()
        if task is None or task not in self.running:
            return
        self.running.discard(task)
        self.refill_soon()

    def reap(self, task: asyncio.Task[None]) -> None:
        """A unit ended: surface its failure, or start what its slot allows."""
        self.tasks.pop(task, None)
        self.running.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self.fail("work_failed", exc)
        self.refill_soon()

    def refill_soon(self) -> None:
        """Fill the slots given up, once per turn of the loop (it reads replies in bunches)."""
        if not self.refilling:
            self.refilling = True
            asyncio.get_running_loop().call_soon(self.refill)

    def refill(self) -> None:  # `refill_soon`'s
        self.refilling = False
        if self.failure is None and not self.stop.is_set():
            self.sync_pauses()
            self.dispatch()
        self.progress.set()

    def fail(self, event: str, exc: BaseException) -> None:
        """Stop the worker with `exc` (the first failure is the one `run()` raises)."""
        if self.failure is None:
            self.failure = exc
            self.log.error(event, error=str(exc))
            self.progress.set()  # the loop ends on it; the worker may run again (not stopped)

    async def wait_idle(self, partitions: set[TopicPartition] | None, timeout_s: float) -> bool:
        """Wait until no running unit touches `partitions` (all when None); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            busy = [
                task
                for task, work in self.tasks.items()
                if partitions is None or not partitions.isdisjoint(work.offsets)
            ]
            remaining = deadline - loop.time()
            if not busy or remaining <= 0:
                return not busy
            await asyncio.wait(busy, timeout=remaining)

    # --- commits, rebalance, stop -----------------------------------------------------
    async def commit(self, partitions: set[TopicPartition] | None = None) -> None:
        """Commit what advanced (in `partitions`, or all owned); a failure is logged, not raised."""
        owned = self.consumer.assignment() - self.restarts.waiting.keys()  # not the old offsets
        offsets = self.tracker.to_commit(owned if partitions is None else partitions & owned)
        if offsets:
            try:
                await self.consumer.commit(offsets)
            except HifiError as exc:
                self.log.warning("commit_failed", error=str(exc), partitions=len(offsets))
                return
            self.tracker.committed(offsets)
        if partitions is None:
            self.handler.after_commit(self.ends.lag_records(owned))

    def assigned(self, partitions: set[TopicPartition]) -> None:
        """Rebalance: `partitions` (possibly none) are ours; the daemon is ready from here on."""
        self.epoch += 1
        self.owned = set(partitions)
        self.session.assigned()
        self.restarts.forget(partitions)
        self.ends.forget(partitions)
        try:
            positions = self.handler.assigned(partitions)
        except Exception as exc:  # raised into aiokafka, it would only be logged
            self.fail("assignment_failed", exc)
            return
        for tp, offset in positions.items():  # an end below one: a topic that started over
            self.consumer.seek(tp, offset)
            self.restarts.took(tp, offset, reread=tp in self.handler.rereads())
        self.assigned_once = True
        self.last_busy_s = asyncio.get_running_loop().time()  # the join was not idle time
        if self.ops is not None:
            self.ops.ready = True
        named = sorted(f"{tp.topic}/{tp.partition}" for tp in partitions)
        self.log.info("partitions_assigned", partitions=named)

    async def revoke(self, partitions: set[TopicPartition]) -> None:
        """Rebalance: stop starting work for `partitions`, wait for theirs, commit, forget them."""
        self.epoch += 1
        self.owned -= partitions
        self.handler.drop(partitions)
        drained = await self.wait_idle(partitions, self.options.shutdown_timeout_s)
        await self.commit(partitions)
        self.tracker.forget(partitions)
        self.restarts.forget(partitions)
        self.ends.forget(partitions)
        self.log.info("partitions_released", partitions=len(partitions), drained=drained)

    async def drain(self) -> None:
        """Stop: let running work finish within the deadline, cancel the rest, commit."""
        self.handler.drop(self.consumer.assignment())
        drained = await self.wait_idle(None, self.options.shutdown_timeout_s)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks))
        await asyncio.shield(self.commit())
        if self.ops is not None:
            self.ops.ready = False
        outstanding = self.tracker.total_outstanding()
        self.log.info("worker_stopped", drained=drained, outstanding=outstanding)
