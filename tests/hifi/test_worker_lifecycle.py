"""The shared consumer lifecycle (`PartitionWorker`) against a fake group member, without a broker.

The same handler as `test_worker.py` (which runs these behaviours against the real broker), with
`FakeGroup` behind the worker's consumer seam: the test decides when a rebalance happens and
reads every commit the worker makes.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from hifi.kafka.settings import KafkaSettings
from hifi.worker import PartitionWorker
from tests.hifi.fake_group import FakeGroup
from tests.hifi.worker_support import (
    WAIT_S,
    Boom,
    Units,
    finish_out_of_order,
    not_done_within,
    options,
    running,
    stop_mid_work,
)

TOPIC = "src"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
NEVER_DIALED = KafkaSettings()  # the fake stands in for the consumer; the guard forbids dialing


async def test_revocation_waits_for_running_work_commits_it_and_drops_the_rest() -> None:
    """A revoked member drops work not started, waits for its running work before the rebalance
    goes on, commits exactly what finished, and reads a partition it keeps from that commit."""
    group = FakeGroup(TOPIC, partitions=2)
    group.append(0, 6)
    group.append(1, 6)
    handler = Units(start=False)
    worker = PartitionWorker(NEVER_DIALED, options("g"), consumer=group.open)
    async with running(worker, handler, [TOPIC]):
        await handler.changes.until(lambda: len(handler.units) == 12, "all twelve records taken")
        handler.start = True
        worker.wake()
        await handler.changes.until(lambda: len(handler.started()) == 4, "four units running")
        handler.unit(0, partition=0).release.set()
        handler.unit(0, partition=1).release.set()
        await handler.changes.until(lambda: len(handler.started()) == 6, "two more running")
        rebalanced = group.rebalance([1])
        await handler.changes.until(lambda: bool(handler.drops), "the revocation to drop work")
        in_flight = [u for u in handler.units if u.started and not u.finished]
        dropped = [u for u in handler.units if u.dropped]
        assert {(u.tp.partition, u.offset) for u in in_flight} == {(0, 1), (1, 1), (0, 2), (1, 2)}
        assert len(dropped) == 6
        assert handler.drops == [{P0, P1}]
        assert await not_done_within(asyncio.ensure_future(rebalanced), 0.3)  # waits for them
        assert group.commits == []  # nothing committed while they run (60 s interval)
        taken_before = len(handler.units)
        handler.auto_release = True
        for unit in in_flight:
            unit.release.set()
        await asyncio.wait_for(rebalanced, WAIT_S)
        assert group.commits == [{P0: 3, P1: 3}]  # both revoked partitions, all that finished
        await handler.changes.until(
            lambda: len(handler.units) == taken_before + 3, "partition 1 read again"
        )
        assert handler.taken()[taken_before:] == [(1, 3), (1, 4), (1, 5)]
    assert all(u.finished and not u.cancelled for u in in_flight)
    assert not any(u.started for u in dropped)


async def test_stop_lets_work_finish_within_the_deadline_cancels_the_rest_and_commits() -> None:
    """`request_stop()` drops work not started, lets running work finish until the deadline,
    cancels what still runs, commits only what finished and closes the consumer."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 5)
    handler = Units(start=False)
    worker = PartitionWorker(
        NEVER_DIALED,
        options("g", max_in_flight=3, shutdown_timeout_s=0.5),
        consumer=group.open,
    )
    await stop_mid_work(worker, handler, TOPIC)
    assert group.committed == {P0: 2}
    assert (group.opened, group.closed) == (1, 1)


async def test_commit_watermark_stops_at_the_first_unfinished_record() -> None:
    """Records finished out of order are committed only up to the first unfinished one, and
    the handler is told the lag behind the high watermark after each commit."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 5)
    handler = Units()
    worker = PartitionWorker(
        NEVER_DIALED, options("g", max_in_flight=5, commit_interval_s=0.05), consumer=group.open
    )

    async def committed() -> int | None:
        return group.committed.get(P0)

    await finish_out_of_order(worker, handler, TOPIC, committed)
    assert [offsets[P0] for offsets in group.commits] == [2, 5]  # a commit only when it moved


async def test_idle_exit_after_the_partition_is_drained_but_not_while_work_runs() -> None:
    """With `until_idle_s`, `run()` returns once nothing arrives or runs, not while a unit runs,
    and commits what finished on the way out."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 2)
    handler = Units()
    worker = PartitionWorker(NEVER_DIALED, options("g", until_idle_s=0.2), consumer=group.open)
    async with running(worker, handler, [TOPIC]) as task:
        await handler.changes.until(lambda: len(handler.started()) == 2, "two units running")
        handler.unit(0).release.set()
        assert await not_done_within(task, 0.6)  # three idle periods while 1 runs
        assert handler.drops == []  # nor did it begin to stop (the drain would wait for 1)
        handler.unit(1).release.set()
        await asyncio.wait_for(task, WAIT_S)
    assert [u.finished for u in handler.units] == [True, True]
    assert group.committed == {P0: 2}


async def test_idle_clock_starts_at_the_first_assignment() -> None:
    """A member waiting for its first assignment longer than `until_idle_s` does not exit; once
    assigned it takes what arrives, then exits when idle."""
    group = FakeGroup(TOPIC, partitions=1, assign_at_join=False)
    handler = Units(auto_release=True)
    worker = PartitionWorker(NEVER_DIALED, options("g", until_idle_s=0.2), consumer=group.open)
    async with running(worker, handler, [TOPIC]) as task:
        assert await not_done_within(task, 0.6)  # three idle periods without an assignment
        await asyncio.wait_for(group.rebalance([0]), WAIT_S)
        group.append(0, 2)
        await asyncio.wait_for(task, WAIT_S)
    assert [(u.offset, u.finished) for u in handler.units] == [(0, True), (1, True)]
    assert group.committed == {P0: 2}


class _Refusing(Units):
    """A handler whose assignment fails, as the auditor's does on a snapshot it cannot read."""

    def assigned(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        raise Boom("snapshot cannot be read")


async def test_an_assignment_the_handler_cannot_take_stops_the_worker_with_its_error() -> None:
    """aiokafka only logs what its assignment callback raises and polls on; the worker stops
    with the error instead, having taken nothing of partitions its handler never took."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 3)
    handler = _Refusing(auto_release=True)
    worker = PartitionWorker(NEVER_DIALED, options("g"), consumer=group.open)
    with pytest.raises(Boom, match="snapshot cannot be read"):
        await asyncio.wait_for(worker.run(handler, topics=[TOPIC]), WAIT_S)
    assert group.listener_failures == 0  # the worker's callback did not raise into the client
    assert handler.units == []
    assert group.committed == {}


async def test_records_polled_after_a_stop_request_start_no_work() -> None:
    """A stop requested just before a poll: the records that poll brings are taken in, but no
    work starts for them (the connector once sent a request for partitions that had moved)."""
    group = FakeGroup("src", partitions=1)
    worker = PartitionWorker(KafkaSettings(), options("g"), consumer=group.open)

    class StopBeforeThePoll(Units):
        def room(self) -> int:  # asked right before each poll
            if self.room_calls == 3:
                group.append(0, 3)  # the poll about to start returns them
                worker.request_stop()
            return super().room()

    handler = StopBeforeThePoll()
    await asyncio.wait_for(worker.run(handler, topics=["src"]), 30)
    assert [unit.offset for unit in handler.units] == [0, 1, 2]  # taken in
    assert handler.started() == []  # never sent


async def test_units_ending_in_one_turn_refill_their_slots_once() -> None:
    """Units whose replies are read in one turn of the event loop end together: their slots
    are filled in one pass (the pauses synced and work dispatched once), not once per unit."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 8)
    handler = Units(start=False)
    worker = PartitionWorker(NEVER_DIALED, options("g", max_in_flight=4), consumer=group.open)
    async with running(worker, handler, [TOPIC]):
        await handler.changes.until(lambda: len(handler.units) == 8, "all eight records taken")
        handler.start = True
        worker.wake()
        await handler.changes.until(lambda: len(handler.started()) == 4, "four units running")
        before = handler.room_calls
        for unit in handler.units[:4]:
            unit.release.set()  # all four end in the same turn
        await handler.changes.until(lambda: len(handler.started()) == 8, "the next four running")
        assert handler.room_calls - before < 4
