"""The soak's steady load: producers straight to Kafka (acks=all) and ingest's senders, each
event numbered by its source and noted in the ledger once accepted."""

from __future__ import annotations

import asyncio
import time
from collections import deque

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from bench.load import Tenants
from chaos.senders import Senders
from hifi.kafka.clients import client_options
from hifi.kafka.settings import KafkaSettings
from soak.ledger import Ledger

EVENT_PADDING = b"x" * 160  # events of about 250 bytes: Tansu keeps the whole hour in memory
_TICK_S = 0.05
_MAX_UNACKED = 64  # batches in flight before the producer waits for the oldest
# 8 senders of 50 events fell behind 3,200 events/s (ingest answers once Kafka acknowledged)
INGEST_BATCH_EVENTS = 100
INGEST_SENDERS = 32


class KafkaLoad:
    """`rate_per_s` events to `topic` as source `letter`; with `tenants`, each of a tenant."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        letter: str,
        rate_per_s: float,
        ledger: Ledger,
        *,
        partitions: int,
        tenants: Tenants | None = None,
    ) -> None:
        self._settings = settings
        self._topic = topic
        self._letter = letter
        self._rate_per_s = rate_per_s
        self._ledger = ledger
        self._partitions = partitions
        self._tenants = tenants
        self.sent = 0
        self.failed = 0  # events whose batch the broker did not acknowledge (not accepted)

    async def run(self, duration_s: float) -> None:
        """Produce for `duration_s` at the rate (behind when the broker is: it catches up)."""
        producer = AIOKafkaProducer(
            **client_options(self._settings), acks="all", linger_ms=5, max_batch_size=1 << 20
        )
        await producer.start()
        unacked: deque[asyncio.Future[None]] = deque()
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            while (elapsed := loop.time() - started) < duration_s:
                due = int(self._rate_per_s * elapsed) - self.sent
                if due > 0:
                    unacked.extend(await self._send(producer, due))
                while len(unacked) > _MAX_UNACKED:
                    await unacked.popleft()
                await asyncio.sleep(_TICK_S)
            await asyncio.gather(*unacked)
        finally:
            await producer.stop()

    async def _send(self, producer: AIOKafkaProducer, count: int) -> list[asyncio.Future[None]]:
        now_ms = time.time_ns() // 1_000_000
        first = self.sent
        self.sent += count
        sends = []
        for partition in range(self._partitions):
            seqs = range(first + partition, first + count, self._partitions)
            if not seqs:
                continue
            batch = producer.create_batch()
            placed: list[int] = []
            for seq in seqs:
                value = self._event(seq, now_ms)
                if batch.append(key=None, value=value, timestamp=None) is None:
                    sends.append(await self._flush(producer, batch, partition, placed, now_ms))
                    batch, placed = producer.create_batch(), []
                    batch.append(key=None, value=value, timestamp=None)
                placed.append(seq)
            sends.append(await self._flush(producer, batch, partition, placed, now_ms))
        return sends

    async def _flush(
        self,
        producer: AIOKafkaProducer,
        batch: object,
        partition: int,
        seqs: list[int],
        now_ms: int,
    ) -> asyncio.Future[None]:
        sent = await producer.send_batch(batch, self._topic, partition=partition)
        return asyncio.ensure_future(self._note(sent, seqs, now_ms))

    async def _note(self, sent: asyncio.Future[object], seqs: list[int], now_ms: int) -> None:
        try:
            await sent
        except KafkaError:
            self.failed += len(seqs)
            return
        for seq in seqs:
            self._ledger.accepted(self._letter, seq, now_ms)

    def _event(self, seq: int, now_ms: int) -> bytes:
        event: dict[str, object] = {"id": f"{self._letter}-{seq}", "event_time": now_ms, "seq": seq}
        if self._tenants is not None:
            event["tenant"] = self._tenants.draw()
        return orjson.dumps(event)[:-1] + b',"payload":"' + EVENT_PADDING + b'"}'


class IngestLoad:
    """`rate_per_s` events posted to the ingest service by `INGEST_SENDERS` senders, as source
    `letter`; each batch is resent until a 2xx, and its events are accepted then."""

    def __init__(
        self, url: str, token: str, letter: str, rate_per_s: float, ledger: Ledger
    ) -> None:
        self._url = url
        self._token = token
        self._letter = letter
        self._rate_per_s = rate_per_s
        self._ledger = ledger
        self.line = ""

    async def run(self, duration_s: float, *, deadline_s: float) -> None:
        events = int(self._rate_per_s * duration_s)
        async with Senders(
            self._url,
            self._token,
            name=self._letter,
            batch_events=INGEST_BATCH_EVENTS,
            concurrency=INGEST_SENDERS,
        ) as senders:
            await senders.send_paced(events, self._rate_per_s, deadline_s)
        counts = senders.counts
        self.line = counts.line()
        for event_id, event_ms in counts.acknowledged.items():
            self._ledger.accepted(self._letter, int(event_id.partition("-")[2]), event_ms)
