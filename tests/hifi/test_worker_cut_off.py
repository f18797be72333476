"""A member cut from Kafka (`hifi.worker.session`), against a fake group whose coordinator goes silent.

Half a session without an answer: no new work, not reachable. A whole session: the partitions
are let go (dropped, paused, nothing started for them whatever is fetched). Kafka answering
again: the member joins anew and reads on from the committed offsets, losing nothing.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import TopicPartition

from hifi.kafka.reach import KafkaReach
from hifi.kafka.settings import KafkaSettings
from hifi.worker import PartitionWorker
from tests.helpers import until
from tests.hifi.fake_group import FakeGroup
from tests.hifi.worker_support import WAIT_S, Units, options, running

TOPIC = "src"
P0 = TopicPartition(TOPIC, 0)
NEVER_DIALED = KafkaSettings()


async def _quiet(handler: Units, seconds: float) -> list[tuple[int, int]]:
    before = handler.started()
    await asyncio.sleep(seconds)
    return handler.started()[len(before) :]


def _three_records() -> tuple[FakeGroup, Units, KafkaReach, PartitionWorker]:
    """A group of one partition with three records, and a worker that commits often."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 3)
    reach = KafkaReach()
    worker = PartitionWorker(
        NEVER_DIALED, options("g", commit_interval_s=0.05), consumer=group.open, reach=reach
    )
    return group, Units(auto_release=True), reach, worker


async def test_half_a_session_of_silence_starts_no_new_work_and_kafka_answering_resumes() -> None:
    group, handler, reach, worker = _three_records()
    async with running(worker, handler, [TOPIC]):
        await handler.changes.until(lambda: len(handler.started()) == 3, "three units run")
        group.silent_since = time.monotonic() - 6  # half of the fake's 10 s session, and more
        assert await until(lambda: not reach.reachable, WAIT_S), "the worker sees the silence"
        assert "group" in reach.readiness().detail
        group.append(0, 2)
        assert await _quiet(handler, 0.5) == []  # fetched, taken in, not started
        assert handler.drops == []  # not lost: still its own
        group.silent_since = None
        await handler.changes.until(lambda: len(handler.started()) == 5, "the two after it")
        assert reach.reachable
    assert group.rejoins == 0
    assert handler.taken() == [(0, n) for n in range(5)]


async def test_the_silence_is_seen_while_the_worker_waits_on_a_commit_held_by_the_cut() -> None:
    """Cut just as a commit went out: the worker's turn waits on that commit, and the daemon is
    not ready after half a session all the same, not once the commit gives up."""
    group, handler, reach, worker = _three_records()
    async with running(worker, handler, [TOPIC]):
        await handler.changes.until(lambda: group.committed.get(P0) == 3, "three committed")
        group.commits_held.set()
        commits = len(group.commits)
        group.append(0, 2)  # something to commit, so the next commit waits
        assert await until(lambda: group.commits_waiting == 1, WAIT_S), "the loop in a commit"
        group.silent_since = time.monotonic() - 6  # half of the fake's 10 s session, and more
        try:
            assert await until(lambda: not reach.reachable, 5.0), "seen during the commit"
            assert group.commits_waiting == 1
            assert len(group.commits) == commits
        finally:  # Kafka answers again, and the commit goes through
            group.silent_since = None
            group.commits_held.clear()
        await handler.changes.until(lambda: group.committed.get(P0) == 5, "all five committed")
        assert await until(lambda: reach.reachable, WAIT_S)


async def test_a_whole_session_of_silence_lets_the_partitions_go_until_kafka_answers() -> None:
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 2)
    handler = Units(auto_release=True)
    worker = PartitionWorker(
        NEVER_DIALED, options("g", commit_interval_s=0.05), consumer=group.open
    )
    async with running(worker, handler, [TOPIC]):
        await handler.changes.until(lambda: group.committed.get(P0) == 2, "two committed")
        group.silent_since = time.monotonic() - 11  # past the 10 s session
        await handler.changes.until(lambda: bool(handler.drops), "the partition dropped")
        assert handler.drops == [{P0}]
        assert P0 in group.paused()
        group.append(0, 3)
        assert await _quiet(handler, 0.5) == []  # another member may send them now
        group.silent_since = None  # answers again: the member joins anew
        await handler.changes.until(lambda: len(handler.started()) == 5, "the three after it")
        assert group.rejoins == 1
        await handler.changes.until(lambda: group.committed.get(P0) == 5, "all five committed")
    assert sorted(set(handler.taken())) == [(0, n) for n in range(5)]  # none lost
