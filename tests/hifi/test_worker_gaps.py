"""Offsets that jump past one not read: read again once, so a fetch that left a batch out loses
nothing, and a gap in the log is taken after one look (a fake group, `tests.hifi.fake_group`)."""

from __future__ import annotations

import structlog
from aiokafka import TopicPartition
from prometheus_client import REGISTRY

from hifi.kafka.settings import KafkaSettings
from hifi.worker import PartitionWorker
from hifi.worker.gaps import CONFIRMED_BEFORE_TRUSTED, OffsetGaps
from tests.hifi.fake_group import FakeGroup, FakeRecord
from tests.hifi.worker_support import Units, options, running

NEVER_DIALED = KafkaSettings()


def _gaps(topic: str, verdict: str) -> float:
    return (
        REGISTRY.get_sample_value("hifi_offset_gaps_total", {"topic": topic, "verdict": verdict})
        or 0.0
    )


def _records(topic: str, offsets: list[int]) -> list[FakeRecord]:
    return [FakeRecord(topic, 0, n, b"{}") for n in offsets]


async def _read_all(group: FakeGroup, topic: str, end: int) -> Units:
    handler = Units(auto_release=True)
    worker = PartitionWorker(
        NEVER_DIALED, options("g", commit_interval_s=0.02), consumer=group.open
    )
    async with running(worker, handler, [topic]):
        tp = TopicPartition(topic, 0)
        await handler.changes.until(lambda: group.committed.get(tp) == end, f"committed to {end}")
    return handler


async def test_a_fetch_that_left_a_batch_out_is_read_again_and_nothing_is_lost() -> None:
    """The broker answers one fetch without offsets 40-59 (and with those after them, as Tansu
    did): the worker reads the partition again from 40, takes every record once, and commits
    to the end. Taken as they came, 40-59 were committed past and lost."""
    topic = "gaps-filled"
    group = FakeGroup(topic, partitions=1)
    group.leave_out_once(0, range(40, 60))
    group.append(0, 100)
    before = _gaps(topic, "filled")
    handler = await _read_all(group, topic, 100)
    assert handler.taken() == [(0, n) for n in range(100)]
    assert _gaps(topic, "filled") == before + 1


async def test_a_gap_in_the_log_is_read_again_once_then_taken() -> None:
    """Offsets 10-19 are not in the log (compacted): read again once, the same jump shows, and
    the records after it are taken; after `CONFIRMED_BEFORE_TRUSTED` such gaps the next ones
    are taken without reading again."""
    topic = "gaps-confirmed"
    group = FakeGroup(topic, partitions=1)
    tp = TopicPartition(topic, 0)
    holes = [range(10 + 20 * i, 20 + 20 * i) for i in range(CONFIRMED_BEFORE_TRUSTED + 2)]
    group.holes[tp] = {n for hole in holes for n in hole}
    end = 20 * len(holes) + 10
    group.append(0, end)
    confirmed, trusted = _gaps(topic, "confirmed"), _gaps(topic, "trusted")
    handler = await _read_all(group, topic, end)
    assert handler.taken() == [(0, n) for n in range(end) if n not in group.holes[tp]]
    assert _gaps(topic, "confirmed") == confirmed + CONFIRMED_BEFORE_TRUSTED
    assert _gaps(topic, "trusted") == trusted + 2


def test_a_poll_is_cut_before_its_first_jump_and_read_again_from_it() -> None:
    """Within a poll and between polls: the records before the jump, and the offset to read
    again from; the same jump read again is taken with what follows it."""
    gaps, tp = OffsetGaps(structlog.get_logger()), TopicPartition("t", 0)
    assert gaps.cut(tp, _records("t", [5, 6, 7]), 5) == (_records("t", [5, 6, 7]), None)
    assert gaps.cut(tp, _records("t", [8, 9, 12, 13]), 8) == (_records("t", [8, 9]), 10)
    assert gaps.cut(tp, _records("t", [12, 13, 14]), 10) == (_records("t", [12, 13, 14]), None)
    assert gaps.cut(tp, _records("t", [20, 21]), 15) == ([], 15)  # between polls
    assert gaps.cut(tp, _records("t", [15, 16]), 15) == (_records("t", [15, 16]), None)  # filled
    assert gaps.cut(tp, _records("t", [30, 31]), None) == (_records("t", [30, 31]), None)
