"""Load for the benchmark: 1 KB JSON events, a fast pre-fill and a paced producer stamping event time."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from hifi import kafka
from hifi.kafka_settings import KafkaSettings

EVENT_BYTES = 1024
_TICK_S = 0.01  # the paced producer sends what is due every 10 ms
_MAX_UNACKED_BATCHES = 256


def make_event(event_id: str, event_time_ms: int, seq: int) -> bytes:
    """A JSON event of exactly `EVENT_BYTES` bytes (the payload pads it)."""
    head = b'{"id":"%s","event_time":%d,"seq":%d,"payload":"' % (
        event_id.encode(),
        event_time_ms,
        seq,
    )
    return b'%s%s"}' % (head, _padding(EVENT_BYTES - len(head) - 2))


@functools.cache
def _padding(length: int) -> bytes:
    return b"x" * max(0, length)


@dataclass(frozen=True)
class Offered:
    """What a paced run actually produced."""

    prefix: str
    events: int
    duration_s: float

    @property
    def rate(self) -> float:
        return self.events / self.duration_s if self.duration_s > 0 else 0.0


def _producer(settings: KafkaSettings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **kafka.client_options(settings),
        acks="all",
        linger_ms=2,
        max_batch_size=1024 * 1024,
        max_request_size=16 * 1024 * 1024,
    )


async def _send_spread(
    producer: AIOKafkaProducer,
    topic: str,
    partitions: int,
    values: list[bytes],
    unacked: list[asyncio.Future[object]],
) -> None:
    """Send `values` as one record batch per partition, round robin, keeping the ack futures."""
    for partition in range(partitions):
        chunk = values[partition::partitions]
        if not chunk:
            continue
        batch = producer.create_batch()
        for value in chunk:
            if batch.append(key=None, value=value, timestamp=None) is None:
                unacked.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
                batch.append(key=None, value=value, timestamp=None)
        unacked.append(await producer.send_batch(batch, topic, partition=partition))
    if len(unacked) >= _MAX_UNACKED_BATCHES:
        await asyncio.gather(*unacked)
        unacked.clear()


async def prefill(
    settings: KafkaSettings, topic: str, *, partitions: int, events: int, prefix: str
) -> int:
    """Produce `events` 1 KB events as fast as the broker takes them; returns how many."""
    producer = _producer(settings)
    await producer.start()
    unacked: list[asyncio.Future[object]] = []
    try:
        chunk = 2000
        for start in range(0, events, chunk):
            now_ms = time.time_ns() // 1_000_000
            values = [
                make_event(f"{prefix}-{seq}", now_ms, seq)
                for seq in range(start, min(events, start + chunk))
            ]
            await _send_spread(producer, topic, partitions, values, unacked)
        await asyncio.gather(*unacked)
    finally:
        await producer.stop()
    return events


async def paced(
    settings: KafkaSettings,
    topic: str,
    *,
    partitions: int,
    rate: float,
    duration_s: float,
    prefix: str,
) -> Offered:
    """Produce at `rate` events/s for `duration_s`, each stamped with its send time (epoch ms)."""
    producer = _producer(settings)
    await producer.start()
    unacked: list[asyncio.Future[object]] = []
    sent = 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    total = int(rate * duration_s)
    try:
        for _ in range(int(duration_s / _TICK_S) * 4 + 100):  # bounded even if ticks run late
            elapsed = loop.time() - started
            due = min(total, int(rate * elapsed)) - sent
            if due > 0:
                now_ms = time.time_ns() // 1_000_000
                values = [make_event(f"{prefix}-{sent + i}", now_ms, sent + i) for i in range(due)]
                await _send_spread(producer, topic, partitions, values, unacked)
                sent += due
            if sent >= total:
                break
            await asyncio.sleep(max(0.0, _TICK_S - (loop.time() - started - elapsed)))
        await asyncio.gather(*unacked)
        finished = loop.time() - started
    finally:
        await producer.stop()
    return Offered(prefix=prefix, events=sent, duration_s=finished)
