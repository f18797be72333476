"""A partition whose topic is deleted and created again under a running worker starts over: its
old records finish, nothing of the old topic is committed over the new one, and the worker reads
and commits the new topic from its beginning (against `FakeGroup`, as Tansu or as Kafka answer)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import structlog
from aiokafka import TopicPartition

from hifi.kafka.settings import KafkaSettings
from hifi.worker import PartitionWorker
from tests.hifi.fake_group import FakeGroup
from tests.hifi.worker_support import Units, options, running

TOPIC = "src"
P0 = TopicPartition(TOPIC, 0)
NEVER_DIALED = KafkaSettings()


def _worker(group: FakeGroup) -> PartitionWorker:
    return PartitionWorker(
        NEVER_DIALED,
        options("g", max_in_flight=8, commit_interval_s=0.02, started_over_confirm_s=0.05),
        consumer=group.open,
    )


def _p0_commits(group: FakeGroup) -> list[int]:
    return [commit[P0] for commit in group.commits if P0 in commit]


async def _old_topic_then_new(
    group: FakeGroup,
) -> tuple[Units, list[MutableMapping[str, Any]], list[dict[str, Any]]]:
    """Five records of the old topic taken, 0-3 finished and committed, 4 still running when
    the topic is deleted and created again with three records; 4 finishes once the worker has
    noticed, and the new topic's three are read and committed."""
    group.append(0, 5)
    handler = Units()
    worker = _worker(group)
    with structlog.testing.capture_logs() as logs:
        async with running(worker, handler, [TOPIC]):
            await handler.changes.until(lambda: len(handler.started()) == 5, "five units")
            for offset in range(4):
                handler.unit(offset).release.set()
            await handler.changes.until(lambda: group.committed.get(P0) == 4, "a commit of 4")
            group.recreate(0, 3)
            await handler.changes.until(lambda: bool(handler.started_over_calls), "the notice")
            loops = handler.room_calls
            await handler.changes.until(lambda: handler.room_calls > loops + 2, "two more loops")
            assert len(handler.units) == 5  # nothing of the new topic before 4 has finished
            view = worker.started_over()
            assert [(v["partition"], v["finishing_old_records"]) for v in view] == [("src/0", True)]
            handler.auto_release = True
            handler.unit(4).release.set()
            await handler.changes.until(lambda: len(handler.units) == 8, "the new topic read")
            await handler.changes.until(lambda: group.committed.get(P0) == 3, "a commit of 3")
            view = worker.started_over()
    return handler, logs, view


async def test_a_topic_created_again_on_a_broker_that_answers_no_error_starts_over() -> None:
    """As on Tansu (a fetch beyond the new end: no error, no records): the end stays below what
    was read, the leader confirms it, and the partition starts over from 0; the old topic's
    last record is never committed over the new one, and one warning line says so."""
    group = FakeGroup(TOPIC, partitions=1)
    handler, logs, view = await _old_topic_then_new(group)
    assert handler.taken() == [(0, n) for n in range(5)] + [(0, 0), (0, 1), (0, 2)]
    assert all(b'"topic":1' in unit.value for unit in handler.units[5:])
    assert handler.started_over_calls == [P0]
    assert 5 not in _p0_commits(group)  # the old topic's watermark, never committed
    after = _p0_commits(group)[_p0_commits(group).index(4) + 1 :]
    assert after[-1] == 3
    assert set(after) <= {0, 1, 2, 3}  # the new topic's, from its beginning
    (line,) = [e for e in logs if e["event"] == "partition_started_over"]
    assert (line["log_level"], line["cause"], line["read_up_to"], line["starts_at"]) == (
        "warning",
        "end_below_position",
        5,
        0,
    )
    assert [(v["times"], v["cause"], v["finishing_old_records"]) for v in view] == [
        (1, "end_below_position", False)
    ]


async def test_a_topic_created_again_on_kafka_starts_over_when_offsets_go_back() -> None:
    """As on Kafka (OFFSET_OUT_OF_RANGE, the position reset to the earliest): the first records
    of the new topic come from below what was read; they are taken only once the old records
    finished, from the new beginning."""
    group = FakeGroup(TOPIC, partitions=1)
    group.resets_out_of_range = True
    handler, logs, view = await _old_topic_then_new(group)
    assert handler.taken()[5:] == [(0, 0), (0, 1), (0, 2)]
    assert 5 not in _p0_commits(group)
    assert [e["cause"] for e in logs if e["event"] == "partition_started_over"] == [
        "offsets_went_back"
    ]
    assert view[0]["times"] == 1


async def test_a_lagging_high_watermark_the_leader_contradicts_is_no_new_topic() -> None:
    """A high watermark below what was read (a new leader's, for a moment) while the leader
    gives the real end: the worker asks, keeps reading where it was, and says nothing."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 5)
    handler = Units(auto_release=True)
    worker = _worker(group)
    with structlog.testing.capture_logs() as logs:
        async with running(worker, handler, [TOPIC]):
            await handler.changes.until(lambda: group.committed.get(P0) == 5, "a commit of 5")
            group.stale_highwater[P0] = 2
            await handler.changes.until(lambda: group.end_questions >= 2, "the leader asked twice")
            del group.stale_highwater[P0]
            group.append(0, 2)
            await handler.changes.until(lambda: group.committed.get(P0) == 7, "a commit of 7")
    assert handler.taken() == [(0, n) for n in range(7)]
    assert handler.started_over_calls == []
    assert worker.started_over() == []
    assert not [e for e in logs if e["event"] == "partition_started_over"]


class _Positioned(Units):
    """A handler that reads its partition from a position of its own (the auditor's audit
    topic: where its snapshots say it applied up to)."""

    def __init__(self, position: int, *, reread: bool = False) -> None:
        super().__init__(auto_release=True)
        self._position = position
        self._reread = reread
        self._owned: set[TopicPartition] = set()

    def assigned(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        self._owned = set(partitions)
        return dict.fromkeys(partitions, self._position)

    def rereads(self) -> set[TopicPartition]:
        return set(self._owned) if self._reread else set()


async def test_a_position_the_handler_gave_beyond_the_end_is_a_topic_that_started_over() -> None:
    """The handler asks for offset 10 of a partition whose topic now holds 3 records (a fresh
    broker beside a kept snapshot): on a broker that answers a fetch beyond the end with
    nothing, the worker notices the end below the position, tells the handler, and reads the
    new topic from 0, instead of waiting at 10 for good."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 3)
    handler = _Positioned(10)
    async with running(_worker(group), handler, [TOPIC]):
        await handler.changes.until(lambda: len(handler.units) == 3, "the new topic read")
    assert handler.started_over_calls == [P0]
    assert handler.taken() == [(0, 0), (0, 1), (0, 2)]


async def test_a_record_to_read_again_that_the_end_is_not_past_is_a_topic_that_started_over() -> (
    None
):
    """The handler reads offset 3 again, a record it read before (to check it is the same
    topic); the partition's new topic ends at 3: no position is beyond the end, but the record
    is not there, so the topic started over and is read from 0."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 3)
    handler = _Positioned(3, reread=True)
    async with running(_worker(group), handler, [TOPIC]):
        await handler.changes.until(lambda: len(handler.units) == 3, "the new topic read")
    assert handler.started_over_calls == [P0]
    assert handler.taken() == [(0, 0), (0, 1), (0, 2)]


async def test_a_record_read_again_that_is_there_is_read_on_from() -> None:
    """The same, with the record there: nothing started over."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 5)
    handler = _Positioned(3, reread=True)
    async with running(_worker(group), handler, [TOPIC]):
        await handler.changes.until(lambda: len(handler.units) == 2, "offsets 3 and 4")
        await handler.changes.until(lambda: group.end_questions == 0, "no question")
    assert handler.started_over_calls == []
    assert handler.taken() == [(0, 3), (0, 4)]
