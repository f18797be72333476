"""Held tier partitions with a fake consumer: rewind and pause at the head, resume at its due time."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from aiokafka import AIOKafkaConsumer, TopicPartition

from retrier.holds import MIN_HOLD_S, Head, Holds

TP = TopicPartition("d.retry_tier0", 1)


class FakeConsumer:
    """Records the seeks and pauses `Holds` asks for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", (tp, offset)))

    def pause(self, *tps: TopicPartition) -> None:
        self.calls.append(("pause", tps))


def _head(due_ms: int, offset: int = 42) -> Head:
    return Head(dest="d", tier=0, offset=offset, due_ms=due_ms, first_failure_ms=1)


async def test_hold_rewinds_pauses_and_ends_at_the_due_time() -> None:
    """A held partition is rewound to its head and paused; its hold ends no earlier than due."""
    consumer = FakeConsumer()
    ended: asyncio.Queue[tuple[TopicPartition, float]] = asyncio.Queue()
    holds = Holds(lambda tp: ended.put_nowait((tp, time.monotonic())))
    started = time.monotonic()
    holds.hold(
        cast(AIOKafkaConsumer, consumer),
        TP,
        _head(int(time.time() * 1000) + 300),
        int(time.time() * 1000),
    )
    assert consumer.calls == [("seek", (TP, 42)), ("pause", (TP,))]
    assert TP in holds
    assert [h.offset for h in holds.heads()] == [42]
    tp, at = await asyncio.wait_for(ended.get(), 30)
    assert tp == TP
    assert at - started >= 0.29
    assert TP not in holds
    assert len(holds) == 0


async def test_overdue_head_is_held_briefly_to_batch_releases() -> None:
    """A head already due is still held MIN_HOLD_S, so a stream of due events is re-offered in batches."""
    ended = asyncio.Event()
    holds = Holds(lambda tp: ended.set())
    started = time.monotonic()
    now_ms = int(time.time() * 1000)
    holds.hold(cast(AIOKafkaConsumer, FakeConsumer()), TP, _head(now_ms - 5000), now_ms)
    await asyncio.wait_for(ended.wait(), 30)
    assert time.monotonic() - started >= MIN_HOLD_S * 0.9


async def test_dropped_holds_never_fire_and_a_new_hold_replaces_the_old() -> None:
    """Dropping a hold (revocation) cancels its timer; holding again keeps only the newest head."""
    fired: list[TopicPartition] = []
    holds = Holds(fired.append)
    consumer = cast(AIOKafkaConsumer, FakeConsumer())
    now_ms = int(time.time() * 1000)
    other = TopicPartition("d.retry_tier0", 0)
    holds.hold(consumer, TP, _head(now_ms + 100, offset=1), now_ms)
    holds.hold(consumer, TP, _head(now_ms + 60_000, offset=2), now_ms)
    holds.hold(consumer, other, _head(now_ms + 150), now_ms)
    holds.drop([other])
    assert [h.offset for h in holds.heads()] == [2]
    done = asyncio.Event()
    holds2 = Holds(lambda tp: done.set())
    holds2.hold(consumer, other, _head(now_ms + 300), now_ms)
    await asyncio.wait_for(done.wait(), 30)  # later than both dropped and replaced timers
    assert fired == []
    holds.clear()
    assert len(holds) == 0
