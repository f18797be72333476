"""The commit watermark under out-of-order completion."""

from __future__ import annotations

import tracemalloc

from aiokafka import TopicPartition

from hifi.offsets import OffsetTracker

TP = TopicPartition("events", 0)


def test_watermark_waits_for_the_lowest_unfinished_offset() -> None:
    """Finishing later offsets first does not move the watermark past an unfinished one."""
    tracker = OffsetTracker()
    tracker.track(TP, range(5))
    tracker.finish(TP, [3])
    tracker.finish(TP, [1])
    assert tracker.to_commit() == {}
    tracker.finish(TP, [0])
    assert tracker.to_commit() == {TP: 2}
    tracker.finish(TP, [2])
    assert tracker.to_commit() == {TP: 4}
    tracker.finish(TP, [4])
    assert tracker.to_commit() == {TP: 5}


def test_gaps_in_offsets_follow_fetch_order() -> None:
    """Offsets skipped by compaction or transaction markers do not hold the watermark back."""
    tracker = OffsetTracker()
    tracker.track(TP, [10, 11, 15, 20])
    for offset in (20, 15, 11, 10):
        tracker.finish(TP, [offset])
    assert tracker.to_commit() == {TP: 21}


def test_committed_offsets_are_not_offered_again() -> None:
    """After `committed` only partitions that advanced further are returned."""
    tracker = OffsetTracker()
    other = TopicPartition("events", 1)
    tracker.track(TP, [0])
    tracker.track(other, [7])
    tracker.finish(TP, [0])
    tracker.finish(other, [7])
    offsets = tracker.to_commit()
    assert offsets == {TP: 1, other: 8}
    tracker.committed(offsets)
    assert tracker.to_commit() == {}
    assert tracker.last_committed(other) == 8
    tracker.track(TP, [1])
    tracker.finish(TP, [1])
    assert tracker.to_commit() == {TP: 2}


def test_forgotten_partitions_ignore_late_outcomes() -> None:
    """Outcomes arriving after a partition was revoked change nothing and raise nothing."""
    tracker = OffsetTracker()
    tracker.track(TP, [0])
    tracker.forget({TP})
    tracker.finish(TP, [0])
    assert tracker.to_commit() == {}
    assert tracker.total_outstanding() == 0


def test_to_commit_can_be_limited_to_some_partitions() -> None:
    """On revocation only the revoked partitions are committed."""
    tracker = OffsetTracker()
    other = TopicPartition("events", 1)
    for tp in (TP, other):
        tracker.track(tp, [0])
        tracker.finish(tp, [0])
    assert tracker.to_commit({other}) == {other: 1}


def test_batches_finishing_out_of_order_move_the_watermark_once_the_head_is_done() -> None:
    """Whole requests finish at once, in any order; the count since the last commit adds up."""
    tracker = OffsetTracker()
    tracker.track(TP, range(0, 500))
    tracker.track(TP, range(500, 1000))
    tracker.finish(TP, range(500, 1000))
    assert tracker.to_commit() == {}
    assert tracker.outstanding(TP) == 1000
    tracker.finish(TP, range(0, 500))
    assert tracker.to_commit() == {TP: 1000}
    assert tracker.outstanding(TP) == 0
    assert tracker.finished_since_commit == 1000


def test_a_partition_that_started_over_commits_from_its_new_beginning() -> None:
    """After `restart` the partition's old state is gone: its new beginning is committed once,
    over the old committed offset, then the watermark follows the new records."""
    tracker = OffsetTracker()
    tracker.track(TP, range(25, 30))
    tracker.finish(TP, range(25, 30))
    tracker.committed(tracker.to_commit())
    assert tracker.last_committed(TP) == 30
    tracker.restart(TP, 0)
    assert tracker.last_committed(TP) is None
    assert tracker.to_commit() == {TP: 0}
    tracker.committed({TP: 0})
    tracker.track(TP, range(0, 3))
    tracker.finish(TP, [1, 2])
    assert tracker.to_commit() == {}
    tracker.finish(TP, [0])
    assert tracker.to_commit() == {TP: 3}
    assert tracker.outstanding(TP) == 0


def test_a_finished_backlog_leaves_no_memory_behind() -> None:
    """A unit of 100,000 offsets finished at once is forgotten with the memory it took: a
    partition that goes quiet after a backlog does not keep megabytes of bookkeeping."""
    tracker = OffsetTracker()
    tracker.track(TP, range(50))  # the partition exists before the backlog
    tracker.finish(TP, range(50))
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracker.track(TP, range(50, 100_050))
        tracker.finish(TP, range(50, 100_050))
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tracker.to_commit() == {TP: 100_050}
    assert tracker.outstanding(TP) == 0
    assert peak - before > 1_000_000  # the backlog was held while it was in flight
    assert after - before < 1_000_000, f"{after - before:,} bytes kept after every offset finished"
