"""The producer: records written in order and acknowledged, raising only hifi errors."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner, murmur2
from aiokafka.structs import RecordMetadata

from hifi.errors import BrokerUnavailable, UnknownTopic
from hifi.kafka.clients import (
    MAX_REQUEST_BYTES,
    Record,
    client_options,
    kafka_errors,
    running_client,
)
from hifi.kafka.reach import KafkaReach
from hifi.kafka.settings import KafkaSettings

_METADATA_CHECK_S = 10.0  # an unknown topic: does the cluster answer at all? (asked this long)


class RecordWriter(Protocol):
    """Anything that durably writes (topic, key, value, headers) records; tests pass fakes."""

    async def send_all(self, records: Sequence[Record]) -> object:
        """Write the records; return once all are acknowledged."""

    async def append_all(self, records: Sequence[Record]) -> Awaitable[object]:
        """Queue the records in order; the result is awaited for their acknowledgement."""


class Producer:
    """Writes records and waits for the broker's acknowledgement; raises only hifi errors.

    Records of concurrent `send_all` calls never interleave within a partition: each call's
    records are written after those of the calls made before it, in its own order. aiokafka
    alone does not promise that (an append that finds its partition's batch full waits for it
    to be sent, and another call's records can take the next batch meanwhile); the retry tiers
    rely on it, since a tier partition is read in due order.

    With a `reach` (a daemon's), a write Kafka does not answer is retried until it is
    (`KafkaReach.patiently`), the whole call again: records may then be written twice, and
    after records of later calls. Without one, the failure is raised (a command, ingest).
    """

    def __init__(
        self, client: AIOKafkaProducer, settings: KafkaSettings, reach: KafkaReach | None = None
    ) -> None:
        self._client = client
        self._settings = settings
        self._reach = reach
        self._appending = asyncio.Lock()  # one call's records go into the batches at a time

    async def send_all(
        self,
        records: Sequence[Record],
        *,
        partition: int | None = None,
        timestamps_ms: Sequence[int] | None = None,
    ) -> list[RecordMetadata]:
        """Produce (topic, key, value, headers) records (to `partition`, else by key); return
        once all are acknowledged, with where each was written. `timestamps_ms` gives each
        record its own timestamp (default: the producer's clock)."""
        acknowledged = await self.append_all(
            records, partition=partition, timestamps_ms=timestamps_ms
        )
        return await acknowledged

    async def append_all(
        self,
        records: Sequence[Record],
        *,
        partition: int | None = None,
        timestamps_ms: Sequence[int] | None = None,
    ) -> Awaitable[list[RecordMetadata]]:
        """`send_all` in two steps: return once the records are queued in order (after those
        of earlier calls), with what to await for their acknowledgement. Await it: a failure
        to write surfaces there."""
        reach = self._reach
        if reach is None:
            return await self._append(records, partition, timestamps_ms)

        async def written_once() -> list[RecordMetadata]:
            return await (await self._append(records, partition, timestamps_ms))

        queued = await reach.patiently(
            "produce", lambda: self._append(records, partition, timestamps_ms)
        )
        return self._patient(queued, reach, written_once)

    @staticmethod
    async def _patient(
        queued: Awaitable[list[RecordMetadata]],
        reach: KafkaReach,
        written_once: Callable[[], Awaitable[list[RecordMetadata]]],
    ) -> list[RecordMetadata]:
        try:
            written = await queued
        except BrokerUnavailable as exc:
            reach.failed("produce", str(exc))
            return await reach.patiently("produce", written_once)
        reach.answered("produce")
        return written

    async def _append(
        self, records: Sequence[Record], partition: int | None, timestamps_ms: Sequence[int] | None
    ) -> Awaitable[list[RecordMetadata]]:
        stamps: Sequence[int | None] = (
            [None] * len(records) if timestamps_ms is None else timestamps_ms
        )
        what = f"produce to {records[0][0]}" if records else "produce"
        try:
            with kafka_errors(self._settings, what):
                async with self._appending:
                    futures = [
                        await self._client.send(
                            topic,
                            value=value,
                            key=key,
                            headers=headers,
                            partition=partition,
                            timestamp_ms=stamp,
                        )
                        for (topic, key, value, headers), stamp in zip(records, stamps, strict=True)
                    ]
        except UnknownTopic as exc:  # aiokafka says so too when no metadata came at all
            if not await self._cluster_answers():
                raise BrokerUnavailable(
                    f"kafka {self._settings.bootstrap}: {what}: no answer from the cluster"
                    " (the topic's metadata did not come)"
                ) from exc
            raise
        return self._acknowledged(futures, what)

    async def _cluster_answers(self) -> bool:
        """Whether any broker answers a metadata request now."""
        try:
            async with asyncio.timeout(_METADATA_CHECK_S):
                await self._client.client.fetch_all_metadata()
        except Exception:  # any failure: the cluster did not answer
            return False
        return True

    async def _acknowledged(
        self, futures: list[asyncio.Future[RecordMetadata]], what: str
    ) -> list[RecordMetadata]:
        with kafka_errors(self._settings, what):
            written: list[RecordMetadata] = await asyncio.gather(*futures)
        return written


_DEFAULT_PARTITIONER = DefaultPartitioner()


def keyed_partitioner(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """aiokafka's default partitioner (murmur2 of the key, as Java's), each key's hash kept:
    aiokafka's murmur2 is pure Python, and a connector keys every audit fact with one of a few
    origin partitions (`hifi/audit/keys.py`)."""
    if not isinstance(key, bytes):
        return int(_DEFAULT_PARTITIONER(key, all_partitions, available))
    return all_partitions[_key_hash(key) % len(all_partitions)]


@functools.lru_cache(maxsize=4096)
def _key_hash(key: bytes) -> int:
    return int(murmur2(key)) & 0x7FFFFFFF


@contextlib.asynccontextmanager
async def open_producer(
    settings: KafkaSettings, *, reach: KafkaReach | None = None, **overrides: Any
) -> AsyncIterator[Producer]:
    """A started `Producer` (acks=all) that is flushed and stopped on exit; with `reach`, its
    writes wait for Kafka (`Producer`)."""
    options: dict[str, Any] = {
        "acks": "all",
        "enable_idempotence": settings.enable_idempotence,
        "linger_ms": 5,
        "max_request_size": MAX_REQUEST_BYTES,
        "partitioner": keyed_partitioner,
    }
    options.update(overrides)
    client = AIOKafkaProducer(**client_options(settings), **options)
    async with running_client(client, settings, "start producer"):
        yield Producer(client, settings, reach)
