"""Kafka clients configured from `KafkaSettings`, and the one place aiokafka errors are translated.

Every call into aiokafka that can fail (start, send, getmany, commit, committed, topics,
position, the offset look-ups, and the admin calls of `hifi.kafka_admin`) runs inside
`kafka_errors()`, which raises hifi's own errors with the cause named (`raise ... from exc`,
like httpx's `map_httpcore_exceptions`). No other module catches an aiokafka exception.
Daemons, the DLQ tools, devstack, chaos, bench and the tests produce with `producer()` and read
a topic with `read_topic()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Protocol

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka import errors as aiokafka_errors
from aiokafka.structs import RecordMetadata

from hifi import probe
from hifi.errors import (
    BrokerAuthFailed,
    BrokerRefused,
    BrokerUnavailable,
    ConfigError,
    UnknownTopic,
)
from hifi.kafka_settings import KafkaSettings

log = structlog.get_logger(__name__)

Headers = list[tuple[str, bytes]]
Record = tuple[str, bytes | None, bytes | None, Headers]  # topic, key, value, headers
_SEEK_GAP_RECORDS = 1000  # read_at seeks over a gap wider than this
_READ_POLL_MS = 300
START_TIMEOUT_S = 15.0  # a client that cannot start by then fails with the cause
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # the largest produce request hifi sends
_AUTH_ERRORS = (
    aiokafka_errors.AuthenticationFailedError,
    aiokafka_errors.AuthenticationMethodNotSupported,
    aiokafka_errors.SaslAuthenticationFailed,
    aiokafka_errors.UnsupportedSaslMechanismError,
    aiokafka_errors.IllegalSaslStateError,
    aiokafka_errors.TopicAuthorizationFailedError,
    aiokafka_errors.GroupAuthorizationFailedError,
    aiokafka_errors.ClusterAuthorizationFailedError,
)


@contextlib.contextmanager
def kafka_errors(settings: KafkaSettings, doing: str) -> Iterator[None]:
    """Translate whatever aiokafka raises while `doing` into hifi's error tree."""
    where = f"kafka {settings.bootstrap}: {doing}"
    try:
        yield
    except aiokafka_errors.UnsupportedCodecError as exc:
        raise BrokerRefused(
            f"{where}: {exc}; hifi reads snappy, lz4 and zstd through aiokafka's codec extras"
            " (pip install 'aiokafka[snappy,lz4,zstd]')"
        ) from exc
    except aiokafka_errors.UnknownTopicOrPartitionError as exc:
        raise UnknownTopic(f"{where}: unknown topic or partition") from exc
    except _AUTH_ERRORS as exc:
        raise BrokerAuthFailed(f"{where}: refused: {_cause(exc)}") from exc
    except ssl.SSLError as exc:
        raise BrokerAuthFailed(f"{where}: TLS failed: {exc.reason or exc}") from exc
    except aiokafka_errors.KafkaError as exc:
        if exc.retriable or isinstance(exc, _TRANSIENT):
            raise BrokerUnavailable(f"{where}: {_cause(exc)}") from exc
        raise BrokerRefused(f"{where}: {_cause(exc)}") from exc
    except (OSError, TimeoutError) as exc:
        raise BrokerUnavailable(f"{where}: {_cause(exc)}") from exc


# Not marked retriable by aiokafka, yet a later attempt can succeed: a commit refused during a
# rebalance, a timeout, or a connection that is refused now.
_TRANSIENT = (
    aiokafka_errors.CommitFailedError,
    aiokafka_errors.IllegalGenerationError,
    aiokafka_errors.RebalanceInProgressError,
    aiokafka_errors.KafkaTimeoutError,
    aiokafka_errors.KafkaConnectionError,
)


def _cause(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and name not in text else (text or name)


def client_options(settings: KafkaSettings) -> dict[str, Any]:
    """Connection and security options shared by every aiokafka client."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        try:
            options["ssl_context"] = ssl.create_default_context(cafile=settings.ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"environment variable HIFI_KAFKA_CA_FILE: {settings.ca_file} is not a readable"
                f" PEM certificate ({exc})"
            ) from None
    if settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.username
        options["sasl_plain_password"] = (
            settings.password.get_secret_value() if settings.password else None
        )
    return options


# --- producing --------------------------------------------------------------------------


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
    """

    def __init__(self, client: AIOKafkaProducer, settings: KafkaSettings) -> None:
        self._client = client
        self._settings = settings
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
        stamps: Sequence[int | None] = (
            [None] * len(records) if timestamps_ms is None else timestamps_ms
        )
        what = f"produce to {records[0][0]}" if records else "produce"
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
        return self._acknowledged(futures, what)

    async def _acknowledged(
        self, futures: list[asyncio.Future[RecordMetadata]], what: str
    ) -> list[RecordMetadata]:
        with kafka_errors(self._settings, what):
            written: list[RecordMetadata] = await asyncio.gather(*futures)
        return written


@contextlib.asynccontextmanager
async def producer(settings: KafkaSettings, **overrides: Any) -> AsyncIterator[Producer]:
    """A started `Producer` (acks=all) that is flushed and stopped on exit."""
    options: dict[str, Any] = {
        "acks": "all",
        "enable_idempotence": settings.enable_idempotence,
        "linger_ms": 5,
        "max_request_size": MAX_REQUEST_BYTES,
    }
    options.update(overrides)
    client = AIOKafkaProducer(**client_options(settings), **options)
    async with _started(client, settings, "start producer"):
        yield Producer(client, settings)


# --- consuming --------------------------------------------------------------------------


class Consumer:
    """An aiokafka consumer whose failures are hifi errors; the worker and readers use only this."""

    def __init__(self, client: AIOKafkaConsumer, settings: KafkaSettings) -> None:
        self._client = client
        self._settings = settings

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assigned: Callable[[set[TopicPartition]], None] | None = None,
        on_revoked: Callable[[set[TopicPartition]], Awaitable[None]] | None = None,
    ) -> None:
        """Join the group for `topics`; the callbacks run inside rebalances, revocation first."""
        listener = _Listener(on_assigned, on_revoked) if on_assigned or on_revoked else None
        self._client.subscribe(topics=list(topics), listener=listener)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._client.assign(list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return set(self._client.assignment())

    async def topics(self) -> set[str]:
        """Every topic in the cluster, from fresh metadata."""
        with kafka_errors(self._settings, "list topics"):
            found: set[str] = await self._client.topics()
        return found

    def partitions(self, topic: str) -> list[TopicPartition]:
        """The partitions of `topic` in the cluster metadata (none if it is unknown)."""
        known = self._client.partitions_for_topic(topic) or ()
        return [TopicPartition(topic, p) for p in sorted(known)]

    async def getmany(
        self, *, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        with kafka_errors(self._settings, "fetch"):
            fetched: dict[TopicPartition, list[Any]] = await self._client.getmany(
                timeout_ms=timeout_ms, max_records=max_records
            )
        return fetched

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        with kafka_errors(self._settings, f"commit {len(offsets)} partitions"):
            await self._client.commit(offsets)

    async def committed(self, tp: TopicPartition) -> int | None:
        with kafka_errors(self._settings, f"read committed offset of {tp.topic}/{tp.partition}"):
            offset: int | None = await self._client.committed(tp)
        return offset

    async def position(self, tp: TopicPartition) -> int:
        with kafka_errors(self._settings, f"read position of {tp.topic}/{tp.partition}"):
            offset: int = await self._client.position(tp)
        return offset

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        with kafka_errors(self._settings, "seek to beginning"):
            await self._client.seek_to_beginning(*partitions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._client.seek(tp, offset)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The first offset still in the log of each partition."""
        with kafka_errors(self._settings, "read beginning offsets"):
            found: dict[TopicPartition, int] = await self._client.beginning_offsets(
                list(partitions)
            )
        return found

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset the next record of each partition will get (read_committed: the last
        stable offset)."""
        with kafka_errors(self._settings, "read end offsets"):
            found: dict[TopicPartition, int] = await self._client.end_offsets(list(partitions))
        return found

    async def offsets_for_times(
        self, times_ms: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The broker's answer, per partition, to "the first offset whose timestamp is at or after
        this time" (None: no such record). Some brokers answer by write time rather than by the
        record's own timestamp: `connector.positions` checks every answer."""
        asked = {tp: max(0, time_ms) for tp, time_ms in times_ms.items()}
        with kafka_errors(self._settings, "look up offsets by time"):
            found = await self._client.offsets_for_times(asked)
        return {tp: None if answer is None else answer.offset for tp, answer in found.items()}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._client.pause(*partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._client.resume(*partitions)

    def paused(self) -> set[TopicPartition]:
        return set(self._client.paused())

    def highwater(self, tp: TopicPartition) -> int | None:
        """The partition's end as seen in the last fetch response (None before one)."""
        highwater: int | None = self._client.highwater(tp)
        return highwater

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        """The partition's last stable offset in the last fetch response (None before one, -1
        when reading uncommitted): where a read_committed reader finds nothing more."""
        offset: int | None = self._client.last_stable_offset(tp)
        return offset


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self,
        on_assigned: Callable[[set[TopicPartition]], None] | None,
        on_revoked: Callable[[set[TopicPartition]], Awaitable[None]] | None,
    ) -> None:
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if revoked and self._on_revoked is not None:
            await self._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if self._on_assigned is not None:
            self._on_assigned(set(assigned))


@contextlib.asynccontextmanager
async def consumer(
    settings: KafkaSettings, *, group_id: str | None, **overrides: Any
) -> AsyncIterator[Consumer]:
    """A started consumer with manual commits only, stopped when the block exits."""
    options: dict[str, Any] = {
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        "max_partition_fetch_bytes": 4 * 1024 * 1024,
    }
    options.update(overrides)
    client = AIOKafkaConsumer(**client_options(settings), **options)
    async with _started(client, settings, "start consumer"):
        yield Consumer(client, settings)


@contextlib.asynccontextmanager
async def _started(
    client: AIOKafkaProducer | AIOKafkaConsumer, settings: KafkaSettings, doing: str
) -> AsyncIterator[None]:
    """Start an aiokafka client (its failure translated) and stop it when the block exits."""
    try:
        await start_client(client.start, settings, doing)
        yield
    finally:
        await _stop(client)


async def _stop(client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
    """Stop a client. A consumer stopped soon after it started can raise the cancellation of its
    own internal task (the coordinator's committed-offsets refresh); that is not a cancellation
    of ours, so it is absorbed unless this task is being cancelled itself.

    aiokafka's `stop()` marks the client closed before it closes anything, so one that gave up
    half-way cannot be stopped again: what it did not reach (a consumer's fetcher, the network
    client with its metadata task and sockets) is closed here, or it would outlive the client
    and refresh metadata every few minutes for the life of the process.
    """
    if await _completed(client.stop()):
        return
    for part in (getattr(client, "_fetcher", None), getattr(client, "_client", None)):
        if part is not None:  # both close idempotently
            await _completed(part.close())


async def _completed(step: Awaitable[None]) -> bool:
    """Await `step`; False when the cancellation of an internal task interrupted it (absorbed,
    unless this task is being cancelled itself)."""
    try:
        await step
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return False
    return True


async def start_client(
    start: Callable[[], Awaitable[None]], settings: KafkaSettings, doing: str
) -> None:
    """Start a client (an aiokafka `start`) within `START_TIMEOUT_S`; a failure says what the
    broker address does."""
    ssl_context = client_options(settings).get("ssl_context")
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            with kafka_errors(settings, doing):
                await start()
    except TimeoutError:
        cause = await probe.diagnose(settings.bootstrap, ssl_context)
        raise BrokerUnavailable(
            f"kafka {settings.bootstrap}: {doing}: no Kafka answer within {START_TIMEOUT_S:g} s"
            f" over {settings.security_protocol}: {cause}"
        ) from None
    except BrokerUnavailable as exc:
        cause = await probe.diagnose(settings.bootstrap, ssl_context)
        raise BrokerUnavailable(f"{exc}: {cause}") from exc


# --- topics -----------------------------------------------------------------------------


async def read_topic(
    settings: KafkaSettings, topic: str, *, at_least: int = 0, timeout_s: float = 30.0
) -> list[Any]:
    """Every record of `topic` from its beginning to its end, or until `at_least` have arrived.

    Reads without a consumer group, so it never disturbs one; a topic that does not exist has
    no records. Raises `TimeoutError` if neither is reached in `timeout_s`.
    """
    async with consumer(settings, group_id=None, isolation_level="read_uncommitted") as reader:
        tps = reader.partitions(topic)
        if not tps and not at_least:
            return []
        records: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if not tps:  # wait for the topic to be created
                await asyncio.sleep(_READ_POLL_MS / 1000)
                await reader.topics()
                tps = reader.partitions(topic)
                continue
            if not reader.assignment():
                reader.assign(tps)
                await reader.seek_to_beginning(*tps)
            fetched = await reader.getmany(timeout_ms=_READ_POLL_MS)
            for batch in fetched.values():
                records.extend(batch)
            if at_least and len(records) >= at_least:
                return records
            if not at_least and not fetched and await _at_end(reader, tps):
                return records
        if at_least:
            return records
        raise TimeoutError(f"reading {topic} did not reach its end in {timeout_s}s")


async def read_at(
    settings: KafkaSettings,
    topic: str,
    offsets: Mapping[int, Sequence[int]],
    *,
    chunk_records: int = 500,
    timeout_s: float = 60.0,
) -> AsyncGenerator[list[Any], None]:
    """The records of `topic` at `offsets` (partition -> offsets), in chunks of at most
    `chunk_records`, partition by partition in offset order.

    Reads without a consumer group. Between wanted offsets more than a fetch apart it seeks
    instead of reading through; an offset no longer in the topic (retention, compaction) is
    skipped. Raises `TimeoutError` when a partition makes no progress for `timeout_s`. Close it
    (`contextlib.aclosing`) when leaving before the end.
    """
    async with consumer(
        settings,
        group_id=None,
        isolation_level="read_uncommitted",
        max_partition_fetch_bytes=1024 * 1024,
    ) as reader:
        chunk: list[Any] = []
        for partition, wanted_offsets in sorted(offsets.items()):
            tp = TopicPartition(topic, partition)
            async for record in _read_partition_at(
                reader, tp, sorted(set(wanted_offsets)), timeout_s, chunk_records
            ):
                chunk.append(record)
                if len(chunk) >= chunk_records:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk


async def _read_partition_at(
    reader: Consumer, tp: TopicPartition, wanted: list[int], timeout_s: float, max_records: int
) -> AsyncIterator[Any]:
    """The records of one partition at the sorted offsets `wanted` (those still in the topic).

    The partition's end is taken from the fetch responses (some brokers answer ListOffsets
    short of the end): reading stops once the position reaches the high watermark.
    """
    if not wanted:
        return
    loop = asyncio.get_running_loop()
    reader.assign([tp])
    index = 0
    reader.seek(tp, wanted[0])
    deadline = loop.time() + timeout_s
    while index < len(wanted):
        # at most a chunk taken out of the fetch at a time: the rest stays in its raw bytes
        polled = await reader.getmany(timeout_ms=_READ_POLL_MS, max_records=max_records)
        fetched = polled.get(tp, [])
        if not fetched:
            highwater = reader.highwater(tp)
            if highwater is not None and await reader.position(tp) >= highwater:
                return  # the rest of `wanted` is past the end
            if loop.time() > deadline:
                raise TimeoutError(f"reading {tp.topic}/{tp.partition} made no progress")
            continue
        deadline = loop.time() + timeout_s
        for record in fetched:
            while index < len(wanted) and wanted[index] < record.offset:
                index += 1  # gone from the topic
            if index < len(wanted) and wanted[index] == record.offset:
                index += 1
                yield record
        if index < len(wanted) and wanted[index] > fetched[-1].offset + _SEEK_GAP_RECORDS:
            reader.seek(tp, wanted[index])


async def _at_end(reader: Consumer, tps: Sequence[TopicPartition]) -> bool:
    for tp in tps:
        highwater = reader.highwater(tp)
        if highwater is None or await reader.position(tp) < highwater:
            return False
    return True


async def committed_offsets(
    settings: KafkaSettings, group_id: str, topic: str
) -> dict[int, int | None]:
    """Committed offsets of a consumer group for `topic`, read through a consumer of that group
    that never joins it (works on brokers without the admin offsets API)."""
    async with consumer(settings, group_id=group_id) as reader:
        return {tp.partition: await reader.committed(tp) for tp in reader.partitions(topic)}
