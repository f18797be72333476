"""The shared consumer lifecycle (`PartitionWorker`) against the real broker, with a test handler
(`worker_support.Units`); `test_worker_lifecycle.py` pins the same lifecycle against a fake."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import Any

from aiokafka import TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from hifi.kafka import admin as kafka_admin
from hifi.kafka.clients import Record
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import committed_offsets
from hifi.kafka.settings import KafkaSettings
from hifi.ops_http import OpsServer
from hifi.worker import PartitionWorker, Work
from tests.hifi.worker_support import (
    WAIT_S,
    Boom,
    Changes,
    Unit,
    Units,
    finish_out_of_order,
    not_done_within,
    options,
    running,
    stop_mid_work,
)


async def produce(
    settings: KafkaSettings, topic: str, counts: Mapping[int, int], *, width: int = 1
) -> None:
    """Write `counts[p]` records to partition p of `topic`, which has `width` partitions (each
    record's key is chosen to land there)."""
    keys: dict[int, bytes] = {}
    i = 0
    while len(keys) < width:
        key = f"k{i}".encode()
        keys.setdefault(DefaultPartitioner()(key, list(range(width)), []), key)
        i += 1
    records: list[Record] = [
        (topic, keys[p], f'{{"p":{p},"n":{n}}}'.encode(), [])
        for p, count in sorted(counts.items())
        for n in range(count)
    ]
    async with open_producer(settings) as producer:
        await producer.send_all(records)


async def test_revocation_drains_and_commits_before_the_new_owner_reads(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """A revoked member drops work not started, waits for and commits its running work, so no
    record finished before the rebalance is read again by the partitions' new owners."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=2)
    await produce(kafka_settings, unique, {0: 6, 1: 6}, width=2)
    changes = Changes()
    first = Units(start=False, changes=changes)
    second = Units(auto_release=True, changes=changes)
    first_worker = PartitionWorker(kafka_settings, options(unique))
    second_worker = PartitionWorker(kafka_settings, options(unique))
    everything = {(p, o) for p in (0, 1) for o in range(6)}
    async with running(first_worker, first, [unique]):
        await first.changes.until(lambda: len(first.units) == 12, "the first member to take all")
        first.start = True
        first_worker.wake()
        await first.changes.until(lambda: len(first.started()) == 4, "4 units to start")
        assert set(first.started()) == {(0, 0), (0, 1), (1, 0), (1, 1)}
        for unit in (first.unit(0, 0), first.unit(0, 1)):
            unit.release.set()  # finished before the rebalance, not committed yet (60 s interval)
        await first.changes.until(lambda: len(first.started()) == 6, "two more units to start")
        async with running(second_worker, second, [unique]):
            await first.changes.until(lambda: bool(first.drops), "the first member to drop work")
            in_flight = [u for u in first.units if u.started and not u.finished]
            dropped = [u for u in first.units if u.dropped]
            assert {(u.tp.partition, u.offset) for u in in_flight} == {
                (0, 1),
                (1, 1),
                (0, 2),
                (1, 2),
            }
            assert len(dropped) == 6
            assert second.units == []  # the new owner has nothing while the old one drains
            for unit in in_flight:
                unit.release.set()
            first.auto_release = True  # what the first member reads after the rebalance
            done_before = {(p, o) for p in (0, 1) for o in range(3)}
            taken_before = len(first.units)

            def read_again() -> list[tuple[int, int]]:
                return first.taken()[taken_before:] + second.taken()

            # The new owners fetch from the committed offsets in offset order, so a finished
            # record read again would be taken no later than the unfinished ones after it.
            await changes.until(
                lambda: set(read_again()) >= everything - done_before,
                "the new owners to read the unfinished records",
            )
            first_worker.request_stop()
            second_worker.request_stop()
    assert set(read_again()) & done_before == set()  # no finished record is read again
    assert all(u.finished and not u.cancelled for u in in_flight)  # waited for, not cancelled
    assert not any(u.started for u in dropped)  # work not started then never starts
    moved = {TopicPartition(unique, p) for p, _ in second.taken()}
    assert moved
    assert moved <= first.drops[0]  # dropped: among the partitions revoked from the first


async def test_stop_lets_work_finish_within_the_deadline_and_cancels_the_rest(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """`request_stop()` drops work not started, lets running work finish until the deadline,
    cancels what still runs then, commits only what finished and returns."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(kafka_settings, unique, {0: 5})
    handler = Units(start=False)
    worker = PartitionWorker(
        kafka_settings, options(unique, max_in_flight=3, shutdown_timeout_s=1.0)
    )
    await stop_mid_work(worker, handler, unique)
    assert await committed_offsets(kafka_settings, unique, unique) == {0: 2}


async def test_idle_exit_after_the_topic_is_drained_but_not_while_work_runs(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """With `until_idle_s`, `run()` returns once the topic is drained and nothing runs, and not
    while a unit still runs."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(kafka_settings, unique, {0: 2})
    handler = Units()
    worker = PartitionWorker(kafka_settings, options(unique, until_idle_s=0.5))
    async with running(worker, handler, [unique]) as task:
        await handler.changes.until(lambda: len(handler.started()) == 2, "two units running")
        handler.unit(0).release.set()
        assert await not_done_within(task, 1.5)  # three idle periods while 1 runs
        assert handler.drops == []  # nor did it begin to stop (the drain would wait for 1)
        handler.unit(1).release.set()
        await asyncio.wait_for(task, WAIT_S)
    assert [u.finished for u in handler.units] == [True, True]
    assert await committed_offsets(kafka_settings, unique, unique) == {0: 2}


class Assignments(OpsServer):
    """An ops endpoint that is never served: counts the assignments (the worker sets `ready`)."""

    def __init__(self, changes: Changes) -> None:
        self.count = 0
        self._changes = changes
        super().__init__(port=0, host="127.0.0.1", component="test")

    @property
    def ready(self) -> bool:
        return self.count > 0

    @ready.setter
    def ready(self, value: bool) -> None:
        self.count += value
        self._changes.notify()


async def test_idle_clock_starts_at_the_first_assignment(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """`until_idle_s` counts from the first assignment: a member that joined for longer than
    that neither exits while joining nor before records produced just after it got partitions."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=2)
    await produce(kafka_settings, unique, {0: 1}, width=2)
    changes = Changes()
    blocker, idle = Units(changes=changes), Units(auto_release=True, changes=changes)
    assignments = Assignments(changes)
    blocker_worker = PartitionWorker(kafka_settings, options(unique))
    idle_worker = PartitionWorker(
        kafka_settings, options(unique, until_idle_s=1.0), ops=assignments
    )
    async with running(blocker_worker, blocker, [unique]):
        await changes.until(lambda: len(blocker.started()) == 1, "the blocker's unit to start")
        async with running(idle_worker, idle, [unique]) as task:
            task.add_done_callback(lambda _: changes.notify())
            # The blocker's revocation waits for its unit, so the group cannot assign the
            # joining member anything until the test releases it.
            await changes.until(lambda: bool(blocker.drops), "the rebalance to begin")
            assert await not_done_within(task, 1.5)
            assert assignments.count == 0  # the wait above was all before the assignment
            assert idle.drops == []  # and the member did not begin to stop
            blocker.unit(0).release.set()
            await changes.until(lambda: assignments.count > 0, "the joining member's partition")
            polls = idle.room_calls
            await changes.until(
                lambda: idle.room_calls > polls or task.done(), "its first poll with partitions"
            )
            assert not task.done(), "exited at its first (empty) poll after the assignment"
            await produce(kafka_settings, unique, {0: 2, 1: 2}, width=2)
            await changes.until(lambda: len(idle.units) == 2, "the records produced since")
            await asyncio.wait_for(task, WAIT_S)  # then idle: it exits
        blocker_worker.request_stop()
    assert all(u.finished for u in idle.units)


async def test_commit_watermark_stops_at_first_unfinished_record(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """Records finished out of order are committed only up to the first unfinished one."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(kafka_settings, unique, {0: 5})
    handler = Units()
    worker = PartitionWorker(
        kafka_settings, options(unique, max_in_flight=5, commit_interval_s=0.1)
    )

    async def committed() -> int | None:
        return (await committed_offsets(kafka_settings, unique, unique))[0]

    await finish_out_of_order(worker, handler, unique, committed)


class SettlingUnits(Units):
    """`Units` whose jobs return what is left to await (as the connector's deliveries return
    their audit facts' acknowledgement): each settles once its `settle` event is set."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settle: dict[int, asyncio.Event] = {}
        self.settled: list[int] = []
        self.stopping = False

    def next_work(self, *, poll_open: bool) -> Work | None:
        work = super().next_work(poll_open=poll_open)
        if work is None:
            return None
        ((tp, (offset,)),) = work.offsets.items()
        return Work(job=self._settling(self.unit(offset, tp.partition), work), offsets=work.offsets)

    async def _settling(self, unit: Unit, work: Work) -> Awaitable[None]:
        await work.job
        return self._settle(unit.offset)

    async def _settle(self, offset: int) -> None:
        settle = self.settle.setdefault(offset, asyncio.Event())
        if self.stopping:  # after `release_all`, nothing waits to settle
            settle.set()
        await settle.wait()
        self.settled.append(offset)
        self.changes.notify()

    def release_all(self) -> None:
        """Release every unit and settle every one, so that the worker's stop drains at once
        instead of waiting out its deadline for settlements no test will give."""
        super().release_all()
        self.stopping = True
        for unit in self.units:
            self.settle.setdefault(unit.offset, asyncio.Event()).set()


async def test_a_settling_unit_gives_its_slot_to_the_next_and_is_done_once_settled(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """A unit whose job returns an awaitable lets the next unit start while it waits, at most
    `max_in_flight` units settle at once, and a record is committed only once its unit settled."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(kafka_settings, unique, {0: 3})
    handler = SettlingUnits(auto_release=True)
    worker = PartitionWorker(
        kafka_settings, options(unique, max_in_flight=1, commit_interval_s=0.1)
    )

    async def committed_after_two_commits() -> int | None:
        seen = len(handler.commits)
        await handler.changes.until(lambda: len(handler.commits) >= seen + 2, "two commits")
        return (await committed_offsets(kafka_settings, unique, unique)).get(0)

    async with running(worker, handler, [unique]):
        # one slot: 0 runs, gives it up to settle, then 1 does the same
        await handler.changes.until(
            lambda: handler.unit(1).finished if len(handler.units) > 1 else False,
            "the second unit to run while the first settles",
        )
        assert handler.unit(0).finished
        # two settle now, the bound for one slot: the third must wait for one of them
        assert await committed_after_two_commits() is None
        assert not handler.unit(2).started
        handler.settle.setdefault(1, asyncio.Event()).set()
        await handler.changes.until(lambda: handler.unit(2).finished, "the third to run")
        handler.settle.setdefault(2, asyncio.Event()).set()
        await handler.changes.until(lambda: handler.settled == [1, 2], "1 and 2 to settle")
        assert await committed_after_two_commits() is None  # 0 has not settled yet
        handler.settle.setdefault(0, asyncio.Event()).set()
        await handler.changes.until(lambda: 0 in handler.settled, "0 to settle")
        assert await committed_after_two_commits() == 3


async def test_max_settling_bounds_the_units_waiting_to_settle_apart_from_the_slots(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """With one slot and `max_settling = 3`, four units run one after the other while none has
    settled; the fifth starts once one of them settles."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(kafka_settings, unique, {0: 5})
    handler = SettlingUnits(auto_release=True)
    worker = PartitionWorker(
        kafka_settings, replace(options(unique, max_in_flight=1), max_settling=3)
    )
    async with running(worker, handler, [unique]):
        await handler.changes.until(
            lambda: len(handler.units) == 5 and handler.unit(3).finished, "four units to run"
        )
        await asyncio.sleep(0.2)  # the behaviour: the fifth does not start during this time
        assert not handler.unit(4).started  # the fifth waits
        assert not handler.settled
        handler.settle.setdefault(0, asyncio.Event()).set()
        await handler.changes.until(lambda: handler.unit(4).finished, "the fifth to run")


async def test_failing_unit_stops_the_worker_after_the_others_drain(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """A unit that raises makes `run()` raise that error once the other running units finished."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(kafka_settings, unique, {0: 3})
    handler = Units()
    worker = PartitionWorker(kafka_settings, options(unique, max_in_flight=3))
    async with running(worker, handler, [unique]) as task:
        await handler.changes.until(lambda: len(handler.started()) == 3, "three units running")
        handler.unit(1).error = Boom("unit 1 failed")
        handler.unit(1).release.set()
        await handler.changes.until(lambda: bool(handler.drops), "the worker to begin stopping")
        assert await not_done_within(task, 0.3)  # 0 and 2 still run
        handler.unit(0).release.set()
        handler.unit(2).release.set()
        done, _ = await asyncio.wait([task], timeout=WAIT_S)
        assert done
        assert isinstance(task.exception(), Boom)
    assert [(u.finished, u.cancelled) for u in handler.units] == [
        (True, False),
        (False, False),
        (True, False),
    ]
    assert await committed_offsets(kafka_settings, unique, unique) == {0: 1}


async def test_no_room_pauses_intake_until_room_returns(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """While the handler has no room nothing more is taken in; intake resumes when room returns."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(kafka_settings, unique, {0: 3})
    handler = Units(auto_release=True)
    worker = PartitionWorker(kafka_settings, options(unique))
    async with running(worker, handler, [unique]):
        await handler.changes.until(lambda: len(handler.units) == 3, "the first records")
        handler.room_left = 0
        seen = handler.room_calls
        # The next room() call returns 0, and the worker pauses the partition in that call, so
        # a fetch still open cannot return what is produced from here on.
        await handler.changes.until(lambda: handler.room_calls > seen, "the worker to see it")
        await produce(kafka_settings, unique, {0: 3})
        polls = handler.room_calls
        await handler.changes.until(
            lambda: handler.room_calls >= polls + 4, "the worker to check its room 4 times"
        )
        assert len(handler.units) == 3
        handler.room_left = 500
        worker.wake()
        await handler.changes.until(lambda: len(handler.units) == 6, "the later records")
    assert handler.taken() == [(0, offset) for offset in range(6)]
