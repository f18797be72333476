"""Load for the auditor's bench: 200-byte events on a timeline of our choosing, and the facts the connector would write.

A source event is `{"id", "event_time", "seq", "payload"}` padded to `EVENT_BYTES`. Events go
round robin over the partitions of a fresh topic, so event `seq` is at partition
`seq % partitions`, offset `seq // partitions`; the facts name each event's origin from that,
and every record batch's base offset is checked against it when acknowledged.

A `Timeline` says when each event happened and, with `stamp`, sets the Kafka timestamps the
same way: a backlog written in a minute then reads, to the auditor's progress clock, like
minutes of live traffic at the timeline's rate, and its minutes settle as they would live.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer

from hifi.audit import FORMAT_MAJOR, FORMAT_MINOR, HDR_FORMAT, Seen, build_facts, encode_fact
from hifi.kafka.clients import client_options
from hifi.kafka.settings import KafkaSettings
from hifi.vocabulary import Outcome

EVENT_BYTES = 200
EVENTS_PER_FACT = 500  # the connector's default max_batch_records: one fact per request
TAKEN_DELAY_MS = 5  # the connector takes an event in this long after its event time
DELIVERY_DELAY_MS = 40  # and a fact's outcome time is its newest event's time plus this
_CHUNK = 5000  # events built and sent per round
_NODE = "connector@bench:0"  # the node the bench's facts name
_MAX_UNACKED = 128  # record batches in flight before waiting for their acks
_AUDIT_FORMAT = f"{FORMAT_MAJOR}.{FORMAT_MINOR}".encode()

Stamped = tuple[bytes, int | None]  # a value and its Kafka timestamp (None: the broker's clock)


@dataclass(frozen=True)
class Timeline:
    """Event `seq` happened at `start_ms + seq * 1000 / rate`; with `stamp`, so is its Kafka timestamp."""

    start_ms: int
    rate: float  # events per second of event time
    stamp: bool = False

    def event_ms(self, seq: int) -> int:
        return self.start_ms + int(seq * 1000 / self.rate)

    def kafka_ms(self, at_ms: int) -> int | None:
        return at_ms if self.stamp else None


def ending_now(events: int, span_s: float, *, stamp: bool = False) -> Timeline:
    """`events` spread evenly over the `span_s` seconds before now."""
    now_ms = time.time_ns() // 1_000_000
    return Timeline(start_ms=now_ms - int(span_s * 1000), rate=events / span_s, stamp=stamp)


def event_id(prefix: str, seq: int) -> str:
    return f"{prefix}-{seq}"


def make_event(prefix: str, seq: int, event_time_ms: int) -> bytes:
    """A JSON event of exactly `EVENT_BYTES` bytes (the payload pads it)."""
    head = b'{"id":"%s","event_time":%d,"seq":%d,"payload":"' % (
        event_id(prefix, seq).encode(),
        event_time_ms,
        seq,
    )
    return b'%s%s"}' % (head, _padding(EVENT_BYTES - len(head) - 2))


@functools.cache
def _padding(length: int) -> bytes:
    return b"x" * max(0, length)


class _Sender:
    """Record batches to explicit partitions of fresh topics, a bounded number unacknowledged.

    Each batch's base offset is known before it is sent (the records sent to its partition so
    far); an acknowledgement at another offset means the origins are wrong, and raises.
    """

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer
        self._sent: dict[tuple[str, int], int] = {}
        self._unacked: list[tuple[asyncio.Future[Any], int]] = []

    async def send(
        self,
        topic: str,
        partition: int,
        records: Sequence[Stamped],
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        batch = self._producer.create_batch()
        for value, timestamp_ms in records:
            if (
                batch.append(key=None, value=value, timestamp=timestamp_ms, headers=headers or [])
                is None
            ):
                await self._flush(batch, topic, partition)
                batch = self._producer.create_batch()
                batch.append(key=None, value=value, timestamp=timestamp_ms, headers=headers or [])
        await self._flush(batch, topic, partition)

    async def _flush(self, batch: Any, topic: str, partition: int) -> None:
        count = batch.record_count()
        if count == 0:
            return
        base = self._sent.get((topic, partition), 0)
        self._sent[topic, partition] = base + count
        future = await self._producer.send_batch(batch, topic, partition=partition)
        self._unacked.append((future, base))
        if len(self._unacked) >= _MAX_UNACKED:
            await self.wait()

    async def wait(self) -> None:
        """Wait for every batch sent; raise if one landed at an unexpected offset."""
        unacked, self._unacked = self._unacked, []
        written = await asyncio.gather(*(future for future, _ in unacked))
        for metadata, (_, base) in zip(written, unacked, strict=True):
            if metadata.offset != base:
                raise RuntimeError(
                    f"{metadata.topic}/{metadata.partition}: a batch landed at offset"
                    f" {metadata.offset}, not {base}; produce to a fresh topic"
                )


def _producer(settings: KafkaSettings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **client_options(settings),
        acks="all",
        linger_ms=5,
        max_batch_size=1024 * 1024,
        max_request_size=16 * 1024 * 1024,
    )


async def produce_events(
    settings: KafkaSettings,
    topic: str,
    *,
    partitions: int,
    events: int,
    prefix: str,
    timeline: Timeline,
) -> float:
    """Produce `events` events round robin over `partitions`; returns the seconds it took."""
    started = time.monotonic()
    producer = _producer(settings)
    await producer.start()
    try:
        sender = _Sender(producer)
        for first in range(0, events, _CHUNK):
            by_partition: list[list[Stamped]] = [[] for _ in range(partitions)]
            for seq in range(first, min(events, first + _CHUNK)):
                at_ms = timeline.event_ms(seq)
                value = make_event(prefix, seq, at_ms)
                by_partition[seq % partitions].append((value, timeline.kafka_ms(at_ms)))
            for partition, records in enumerate(by_partition):
                await sender.send(topic, partition, records)
        await sender.wait()
    finally:
        await producer.stop()
    return time.monotonic() - started


async def produce_facts(
    settings: KafkaSettings,
    audit_topic: str,
    *,
    dest: str,
    topic: str,
    partitions: int,
    events: int,
    prefix: str,
    timeline: Timeline,
) -> tuple[int, float]:
    """A `delivered` fact per `EVENTS_PER_FACT` consecutive events of a partition, built by
    `hifi.audit.build_facts` as the connector's are, to partition 0 of `audit_topic` (the connector
    keys facts by destination); returns (facts, seconds)."""
    started = time.monotonic()
    headers = [(HDR_FORMAT, _AUDIT_FORMAT)]
    per_partition = -(-events // partitions)
    facts = 0
    producer = _producer(settings)
    await producer.start()
    try:
        sender = _Sender(producer)
        for first in range(0, per_partition, EVENTS_PER_FACT):
            offsets = range(first, min(per_partition, first + EVENTS_PER_FACT))
            records: list[Stamped] = []
            for partition in range(partitions):
                seen = [
                    _seen(topic, partition, offset, partitions, prefix, timeline)
                    for offset in offsets
                    if offset * partitions + partition < events
                ]
                if not seen:
                    continue
                outcome_ms = seen[-1].event_time_ms + DELIVERY_DELAY_MS
                for fact in build_facts(
                    dest,
                    _NODE,
                    Outcome.DELIVERED,
                    seen,
                    reason=None,
                    status=200,
                    outcome_ms=outcome_ms,
                ):
                    records.append((encode_fact(fact), timeline.kafka_ms(outcome_ms)))
            facts += len(records)
            await sender.send(audit_topic, 0, records, headers)
        await sender.wait()
    finally:
        await producer.stop()
    return facts, time.monotonic() - started


def _seen(
    topic: str, partition: int, offset: int, partitions: int, prefix: str, timeline: Timeline
) -> Seen:
    seq = offset * partitions + partition
    at_ms = timeline.event_ms(seq)
    return Seen((topic, partition, offset), event_id(prefix, seq), at_ms, at_ms + TAKEN_DELAY_MS)
