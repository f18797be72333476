"""`hifi.kafka.coalescing.Coalescing`: concurrent writers' records in one producer call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest

from hifi.errors import BrokerUnavailable
from hifi.kafka.coalescing import Coalescing


def _record(n: int) -> tuple[str, bytes, bytes, list[Any]]:
    return ("t", b"k", str(n).encode(), [])


class Writer:
    """A `RecordWriter` that keeps each call's records; a call is queued once `queue` is set
    and acknowledged once `acknowledge` is; `failing` makes the next call (or its
    acknowledgement, with `ack_failing`) raise."""

    def __init__(self) -> None:
        self.calls: list[list[bytes]] = []
        self.queue = asyncio.Event()
        self.queue.set()
        self.acknowledge = asyncio.Event()
        self.acknowledge.set()
        self.failing: Exception | None = None
        self.ack_failing: Exception | None = None

    async def send_all(self, records: Sequence[Any]) -> object:
        return await (await self.append_all(records))

    async def append_all(self, records: Sequence[Any]) -> Awaitable[object]:
        await self.queue.wait()
        if self.failing is not None:
            exc, self.failing = self.failing, None
            raise exc
        self.calls.append([value for _, _, value, _ in records])
        return self._acknowledged(self.ack_failing)

    async def _acknowledged(self, failing: Exception | None) -> object:
        await self.acknowledge.wait()
        if failing is not None:
            raise failing
        return len(self.calls)


async def test_calls_of_one_turn_are_one_call_in_their_order() -> None:
    writer = Writer()
    coalescing = Coalescing(writer)
    waits = [await coalescing.append_all([_record(n), _record(n + 10)]) for n in range(3)]
    assert writer.calls == []  # queued on the next turn of the loop
    await asyncio.gather(*waits)
    assert writer.calls == [[b"0", b"10", b"1", b"11", b"2", b"12"]]


async def test_calls_made_while_a_group_is_queued_are_the_next_group() -> None:
    writer = Writer()
    writer.queue.clear()  # the producer's lock is held: the first group waits to be queued
    coalescing = Coalescing(writer)
    first = await coalescing.append_all([_record(1)])
    for _ in range(3):
        await asyncio.sleep(0)
    later = [await coalescing.append_all([_record(n)]) for n in (2, 3)]
    writer.queue.set()
    await asyncio.gather(first, *later)
    assert writer.calls == [[b"1"], [b"2", b"3"]]


async def test_each_caller_waits_for_the_acknowledgement_of_its_group() -> None:
    writer = Writer()
    writer.acknowledge.clear()
    coalescing = Coalescing(writer)
    waits = [asyncio.ensure_future(await coalescing.append_all([_record(n)])) for n in (1, 2)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert writer.calls == [[b"1", b"2"]]
    assert not any(wait.done() for wait in waits)
    writer.acknowledge.set()
    await asyncio.gather(*waits)


async def test_a_failure_to_queue_reaches_every_caller_of_its_group_only() -> None:
    writer = Writer()
    writer.failing = BrokerUnavailable("kafka b:9092: no answer")
    coalescing = Coalescing(writer)
    failed = [await coalescing.append_all([_record(n)]) for n in (1, 2)]
    for wait in failed:
        with pytest.raises(BrokerUnavailable, match="no answer"):
            await wait
    await (await coalescing.append_all([_record(3)]))  # the next group is written
    assert writer.calls == [[b"3"]]


async def test_a_failed_acknowledgement_reaches_every_caller() -> None:
    writer = Writer()
    writer.ack_failing = BrokerUnavailable("kafka b:9092: not acknowledged")
    coalescing = Coalescing(writer)
    waits = [await coalescing.append_all([_record(n)]) for n in (1, 2)]
    results = await asyncio.gather(*waits, return_exceptions=True)
    assert [type(result) for result in results] == [BrokerUnavailable, BrokerUnavailable]


async def test_one_caller_cancelled_leaves_the_others_waiting() -> None:
    writer = Writer()
    writer.acknowledge.clear()
    coalescing = Coalescing(writer)
    gone = asyncio.ensure_future(await coalescing.append_all([_record(1)]))
    kept = asyncio.ensure_future(await coalescing.append_all([_record(2)]))
    await asyncio.sleep(0)
    gone.cancel()
    writer.acknowledge.set()
    await kept
    assert gone.cancelled()
    assert writer.calls == [[b"1", b"2"]]
