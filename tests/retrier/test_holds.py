"""Held tier partitions: a hold keeps its head and ends at the head's due time, never earlier."""

from __future__ import annotations

import asyncio
import time

from aiokafka import TopicPartition

from retrier.holds import MIN_HOLD_S, Head, Holds

TP = TopicPartition("d.retry_tier0", 1)


def _head(due_ms: int, offset: int = 42) -> Head:
    return Head(dest="d", tier=0, offset=offset, due_ms=due_ms, first_failure_ms=1)


async def test_hold_keeps_the_head_and_ends_at_the_due_time() -> None:
    """A held partition keeps its head; the hold ends, and the owner is told, no earlier than due."""
    ended: asyncio.Queue[float] = asyncio.Queue()
    holds = Holds(lambda: ended.put_nowait(time.monotonic()))
    started = time.monotonic()
    holds.hold(TP, _head(int(time.time() * 1000) + 300), int(time.time() * 1000))
    assert TP in holds
    assert holds.partitions() == {TP}
    assert [h.offset for h in holds.heads()] == [42]
    at = await asyncio.wait_for(ended.get(), 30)
    assert at - started >= 0.29
    assert TP not in holds
    assert len(holds) == 0


async def test_overdue_head_is_held_briefly_to_batch_releases() -> None:
    """A head already due is still held MIN_HOLD_S, so a stream of due events is re-offered in batches."""
    ended = asyncio.Event()
    holds = Holds(ended.set)
    started = time.monotonic()
    now_ms = int(time.time() * 1000)
    holds.hold(TP, _head(now_ms - 5000), now_ms)
    await asyncio.wait_for(ended.wait(), 30)
    assert time.monotonic() - started >= MIN_HOLD_S * 0.9


async def test_dropped_holds_never_fire_and_a_new_hold_replaces_the_old() -> None:
    """Dropping a hold (revocation) cancels its timer; holding again keeps only the newest head."""
    fired: list[str] = []
    holds = Holds(lambda: fired.append("due"))
    now_ms = int(time.time() * 1000)
    other = TopicPartition("d.retry_tier0", 0)
    holds.hold(TP, _head(now_ms + 100, offset=1), now_ms)
    holds.hold(TP, _head(now_ms + 60_000, offset=2), now_ms)
    holds.hold(other, _head(now_ms + 150), now_ms)
    holds.drop([other])
    assert [h.offset for h in holds.heads()] == [2]
    done = asyncio.Event()
    holds2 = Holds(done.set)
    holds2.hold(other, _head(now_ms + 300), now_ms)
    await asyncio.wait_for(done.wait(), 30)  # later than both dropped and replaced timers
    assert fired == []
    holds.drop(holds.partitions())
    assert len(holds) == 0
