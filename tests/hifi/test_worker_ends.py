"""A paused partition's lag stays true (`hifi/worker/ends.py`): against the real broker, where
a paused partition is not fetched and aiokafka's high watermark of it stands still."""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from aiokafka import TopicPartition

from devstack.kafka_tools import move_committed
from hifi.errors import BrokerUnavailable
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings
from hifi.offsets import OffsetTracker
from hifi.worker import PartitionWorker
from hifi.worker.ends import Ends
from tests.hifi.worker_support import Units, options, running

ENDS_EVERY_S = 0.2


async def _produce_one_by_one(settings: KafkaSettings, topic: str, count: int) -> None:
    """`count` records to partition 0, each its own batch: Tansu 0.6 answers ListOffsets with a
    partition's last batch counted as one record (`hifi.worker.ends`), so each batch is one here."""
    async with open_producer(settings) as producer:
        for n in range(count):
            await producer.send_all([(topic, None, f'{{"n":{n}}}'.encode(), [])])


def _lag_is(handler: Units, tp: TopicPartition, lag: int) -> bool:
    return bool(handler.commits) and handler.commits[-1].get(tp) == lag


@pytest.mark.integration
async def test_lag_rises_while_the_partition_is_paused(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """Records produced to a partition paused for want of room raise its lag (the fetch's high
    watermark alone would keep it at 0), and `highwater()` says the same end."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    tp = TopicPartition(unique, 0)
    await _produce_one_by_one(kafka_settings, unique, 3)
    handler = Units(auto_release=True)
    worker = PartitionWorker(
        kafka_settings, options(unique, commit_interval_s=0.1, ends_every_s=ENDS_EVERY_S)
    )
    async with running(worker, handler, [unique]):
        await handler.changes.until(lambda: _lag_is(handler, tp, 0), "3 taken and committed")
        handler.room_left = 0
        seen = handler.room_calls
        await handler.changes.until(lambda: handler.room_calls > seen, "the pause")
        await _produce_one_by_one(kafka_settings, unique, 5)
        await handler.changes.until(lambda: _lag_is(handler, tp, 5), "a lag of 5 while paused")
        assert len(handler.units) == 3  # nothing was fetched: the end came from the leader
        assert worker.highwater(tp) == 8
        handler.room_left = 500
        worker.wake()
        await handler.changes.until(lambda: _lag_is(handler, tp, 0), "the 5 taken")


@pytest.mark.integration
async def test_a_partition_paused_since_its_assignment_counts_from_the_group_offset(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """A member that never fetched nor committed a partition (paused from the start) reports
    its lag from the group's committed offset, and it rises as records arrive."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    tp = TopicPartition(unique, 0)
    await _produce_one_by_one(kafka_settings, unique, 4)
    await move_committed(kafka_settings, unique, unique, 0, 1)
    handler = Units(auto_release=True)
    handler.room_left = 0
    worker = PartitionWorker(
        kafka_settings, options(unique, commit_interval_s=0.1, ends_every_s=ENDS_EVERY_S)
    )
    async with running(worker, handler, [unique]):
        await handler.changes.until(lambda: _lag_is(handler, tp, 3), "a lag of 4 - 1")
        await _produce_one_by_one(kafka_settings, unique, 2)
        await handler.changes.until(lambda: _lag_is(handler, tp, 5), "a lag of 6 - 1")
    assert handler.units == []


class _Unanswering:
    """A consumer whose leaders do not answer: one partition owned, paused, never fetched."""

    tp = TopicPartition("t", 0)

    def assignment(self) -> set[TopicPartition]:
        return {self.tp}

    def paused(self) -> set[TopicPartition]:
        return {self.tp}

    def highwater(self, tp: TopicPartition) -> int | None:
        return 7

    async def end_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        raise BrokerUnavailable("read end offsets: the broker is down")

    async def committed_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        raise AssertionError("asked only once the ends were answered")


async def test_unanswered_questions_cost_one_log_line_and_keep_the_last_end() -> None:
    """A broker that does not answer: one line however often it is asked, no error raised,
    and the end stays the last one known."""
    consumer = _Unanswering()
    tracker = OffsetTracker()
    ends = Ends(consumer, tracker, structlog.get_logger(), every_s=ENDS_EVERY_S)  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            await ends.refresh()
    assert [e["event"] for e in logs] == ["paused_ends_unknown"]
    assert ends.end(consumer.tp) == 7
    assert ends.lag_records({consumer.tp}) == {}  # no committed offset known
