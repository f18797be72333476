"""Load for the benchmark: 1 KB JSON events, a fast pre-fill and a paced producer stamping event time."""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from hifi.kafka.clients import client_options
from hifi.kafka.settings import KafkaSettings

EVENT_BYTES = 1024
_TICK_S = 0.01  # the paced producer sends what is due every 10 ms
_MAX_UNACKED_BATCHES = 256


def make_event(event_id: str, event_time_ms: int, seq: int, tenant: str | None = None) -> bytes:
    """A JSON event of exactly `EVENT_BYTES` bytes (the payload pads it); with `tenant`, its
    `tenant` field names it."""
    head = b'{"id":"%s","event_time":%d,"seq":%d,' % (event_id.encode(), event_time_ms, seq)
    if tenant is not None:
        head += b'"tenant":"%s",' % tenant.encode()
    head += b'"payload":"'
    return b'%s%s"}' % (head, _padding(EVENT_BYTES - len(head) - 2))


class Tenants:
    """Tenant ids `t0`..`t{n-1}` drawn with a Zipf distribution of exponent `s` (rank k has
    weight 1/k^s: a few hot tenants, a long tail), from a seeded generator."""

    def __init__(self, count: int, s: float, *, seed: int = 0) -> None:
        weights = [1 / rank**s for rank in range(1, count + 1)]
        total = sum(weights)
        self._cumulative = list(itertools.accumulate(weight / total for weight in weights))
        self._random = random.Random(seed)
        self.names = [f"t{rank}" for rank in range(count)]

    def draw(self) -> str:
        index = bisect.bisect_left(self._cumulative, self._random.random())
        return self.names[min(index, len(self.names) - 1)]


def _events(
    prefix: str, start: int, stop: int, now_ms: int, tenants: Tenants | None
) -> list[bytes]:
    return [
        make_event(f"{prefix}-{seq}", now_ms, seq, None if tenants is None else tenants.draw())
        for seq in range(start, stop)
    ]


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
        **client_options(settings),
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
    settings: KafkaSettings,
    topic: str,
    *,
    partitions: int,
    events: int,
    prefix: str,
    tenants: Tenants | None = None,
    transform: Callable[[list[bytes]], Awaitable[list[bytes]]] | None = None,
) -> int:
    """Produce `events` 1 KB events as fast as the broker takes them (each of a tenant drawn
    from `tenants`, if given; each chunk written as `transform` makes it, e.g. Avro); returns
    how many."""
    producer = _producer(settings)
    await producer.start()
    unacked: list[asyncio.Future[object]] = []
    try:
        chunk = 2000
        for start in range(0, events, chunk):
            now_ms = time.time_ns() // 1_000_000
            values = _events(prefix, start, min(events, start + chunk), now_ms, tenants)
            if transform is not None:
                values = await transform(values)
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
    tenants: Tenants | None = None,
) -> Offered:
    """Produce at `rate` events/s for `duration_s`, each stamped with its send time (epoch ms)
    (and of a tenant drawn from `tenants`, if given)."""
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
                values = _events(prefix, sent, sent + due, now_ms, tenants)
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
