"""Kafka clients configured from `KafkaSettings`, and the only place aiokafka errors are translated."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Protocol

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from config.settings import KafkaSettings
from plumbing.errors import BrokerUnavailable

log = structlog.get_logger(__name__)

Headers = list[tuple[str, bytes]]
_READ_POLL_MS = 300
_TOPIC_ALREADY_EXISTS = 36  # Kafka protocol error code: another client created it first


def client_options(settings: KafkaSettings) -> dict[str, Any]:
    """Connection and security options shared by every aiokafka client."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl.create_default_context(cafile=settings.ca_file)
    if settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.username
        options["sasl_plain_password"] = (
            settings.password.get_secret_value() if settings.password else None
        )
    return options


@contextlib.asynccontextmanager
async def producer(settings: KafkaSettings, **overrides: Any) -> AsyncIterator[Producer]:
    """A started `Producer` (acks=all) that is flushed and stopped on exit."""
    client = AIOKafkaProducer(
        **client_options(settings),
        acks="all",
        enable_idempotence=settings.enable_idempotence,
        linger_ms=5,
        max_request_size=16 * 1024 * 1024,
        **overrides,
    )
    try:
        await client.start()
    except KafkaError as exc:
        await client.stop()
        raise BrokerUnavailable(
            f"kafka {settings.bootstrap}: producer cannot start: {exc}"
        ) from exc
    try:
        yield Producer(client)
    finally:
        await client.stop()


class RecordWriter(Protocol):
    """Anything that durably writes (topic, key, value, headers) records; tests pass fakes."""

    async def send_all(
        self, records: Sequence[tuple[str, bytes | None, bytes | None, Headers]]
    ) -> None: ...


class Producer:
    """Writes records and waits for the broker's acknowledgement; raises only hifi errors."""

    def __init__(self, client: AIOKafkaProducer) -> None:
        self._client = client

    async def send_all(
        self, records: Sequence[tuple[str, bytes | None, bytes | None, Headers]]
    ) -> None:
        """Produce (topic, key, value, headers) records and return once all are acknowledged."""
        try:
            futures = [
                await self._client.send(topic, value=value, key=key, headers=headers)
                for topic, key, value, headers in records
            ]
            await asyncio.gather(*futures)
        except KafkaError as exc:
            raise BrokerUnavailable(f"kafka produce failed: {exc}") from exc

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers | None = None,
    ) -> None:
        await self.send_all([(topic, key, value, headers or [])])


def consumer(
    settings: KafkaSettings, *, group_id: str | None, **overrides: Any
) -> AIOKafkaConsumer:
    """A consumer with manual commits only; the caller subscribes, starts and stops it."""
    options: dict[str, Any] = {
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        "max_partition_fetch_bytes": 4 * 1024 * 1024,
    }
    options.update(overrides)
    return AIOKafkaConsumer(**client_options(settings), **options)


@contextlib.asynccontextmanager
async def started(
    consumer: AIOKafkaConsumer, settings: KafkaSettings
) -> AsyncIterator[AIOKafkaConsumer]:
    """Start `consumer` (a failure becomes `BrokerUnavailable`) and stop it when the block exits."""
    try:
        await consumer.start()
    except KafkaError as exc:
        await consumer.stop()
        raise BrokerUnavailable(f"kafka {settings.bootstrap}: {exc}") from exc
    try:
        yield consumer
    finally:
        await consumer.stop()


async def ensure_topics(settings: KafkaSettings, names: Iterable[str], *, partitions: int) -> None:
    """Create whichever of `names` do not exist yet; existing topics are left as they are."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        missing = [name for name in names if name not in existing]
        if missing:
            response = await admin.create_topics(
                [NewTopic(name, partitions, settings.replication_factor) for name in missing]
            )
            failed = [
                f"{error[0]}: error {error[1]}"
                for error in response.topic_errors
                if error[1] not in (0, _TOPIC_ALREADY_EXISTS)
            ]
            if failed:
                raise BrokerUnavailable(
                    f"kafka {settings.bootstrap}: cannot create topics: {', '.join(failed)}"
                )
            log.info("topics_created", topics=missing, partitions=partitions)
    except KafkaError as exc:
        raise BrokerUnavailable(f"kafka {settings.bootstrap}: cannot create topics: {exc}") from exc
    finally:
        await admin.close()


async def read_to_end(settings: KafkaSettings, topic: str, *, timeout_s: float = 30.0) -> list[Any]:
    """Every record of `topic` from the beginning to the high watermark seen when reading ends.

    Reads without a consumer group, so it never disturbs one. Raises `TimeoutError` if the end
    is not reached in `timeout_s`, and `BrokerUnavailable` if Kafka cannot be reached.
    """
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, auto_offset_reset="earliest"
    )
    async with started(consumer, settings):
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            fetched = await consumer.getmany(*tps, timeout_ms=_READ_POLL_MS)
            for batch in fetched.values():
                records.extend(batch)
            if not fetched and await _at_end(consumer, tps):
                return records
        raise TimeoutError(f"reading {topic} did not reach its end in {timeout_s}s")


async def _at_end(consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition]) -> bool:
    for tp in tps:
        highwater = consumer.highwater(tp)
        if highwater is None or await consumer.position(tp) < highwater:
            return False
    return True
