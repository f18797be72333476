"""The connector daemon: intake from Kafka, bounded parallel delivery, watermark commits, drain on stop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterable, Iterator
from operator import attrgetter
from typing import Any

import httpx
import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from config.catalog import Destination
from config.settings import KafkaSettings
from connector import metrics
from connector.delivery import Deliverer, http_client
from connector.handoff import HandOff
from connector.rebatch import Batch, take_batch
from plumbing import kafka
from plumbing.envelope import Event, KafkaRecord, parse_records
from plumbing.errors import MalformedRecord
from plumbing.group import GroupListener
from plumbing.offsets import OffsetTracker
from plumbing.ops_http import OpsServer

log = structlog.get_logger(__name__)

_POLL_TIMEOUT_MS = 200
# How long the broker may hold a fetch that has no data yet. Kafka answers as soon as data arrives,
# so this only paces idle polls; some brokers (Tansu) hold every fetch this long, which was the
# bulk of the end-to-end lag at aiokafka's default of 500 ms.
FETCH_MAX_WAIT_MS = 20
_PAUSED_WAIT_S = 0.5
_BUFFER_WINDOWS = 2  # records buffered beyond those in flight, in units of max_in_flight batches
# Cyclic GC: a young-generation pass every 10,000 allocations instead of 700. At one Event, one
# ConsumerRecord and their lists per record, the default ran ~1,000 passes per 300k events, with
# pauses of up to ~100 ms; start-up objects are frozen out of every pass. Not higher: at 100,000
# the reference cycles of failed attempts (exceptions holding frames that hold 500 KB bodies)
# lived long enough to take the connector's peak RSS from ~150 MB to 680 MB under 1 % 503s.
_GC_GEN0_THRESHOLD = 10_000
_partition_of = attrgetter("tp")
_offset_of = attrgetter("offset")
_value_of = attrgetter("value")
_event_time_of = attrgetter("event_time_ms")


def _tune_gc() -> None:
    """Freeze what start-up allocated and collect the young generation less often (process-wide)."""
    gen0, gen1, gen2 = gc.get_threshold()
    if gen0 >= _GC_GEN0_THRESHOLD:
        return  # done already (a second connector in this process)
    gc.collect()
    gc.freeze()
    gc.set_threshold(_GC_GEN0_THRESHOLD, gen1, gen2)


def _by_partition(events: Iterable[Event]) -> Iterator[tuple[TopicPartition, list[int]]]:
    """Runs of consecutive events of one partition, as the partition and their offsets."""
    for tp, run in itertools.groupby(events, _partition_of):
        yield tp, list(map(_offset_of, run))


def _partition_counts(events: Iterable[Event]) -> Counter[TopicPartition]:
    """How many of `events` belong to each partition."""
    return Counter(map(_partition_of, events))


def _record_partition_counts(records: Iterable[KafkaRecord]) -> Counter[TopicPartition]:
    return Counter(TopicPartition(record.topic, record.partition) for record in records)


class Connector:
    """Delivers one destination's topics; `run()` returns after a stop request or idle timeout."""

    def __init__(
        self,
        dest: Destination,
        settings: KafkaSettings,
        *,
        metrics_port: int | None = None,
        until_idle_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.dest = dest
        self._settings = settings
        self._until_idle_s = until_idle_s
        self._transport = transport
        self.ops = OpsServer(port=metrics_port) if metrics_port is not None else None
        self._stop = asyncio.Event()
        self._progress = asyncio.Event()
        self._tracker = OffsetTracker()
        self._pending: deque[Event] = deque()
        self._malformed: list[tuple[KafkaRecord, MalformedRecord]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._task_partitions: dict[asyncio.Task[None], Counter[TopicPartition]] = {}
        self._failure: BaseException | None = None
        self._paused = False
        self._assignment_epoch = 0  # advanced by every rebalance callback
        self._taking_in = False  # a poll is being taken in: batch it whole before dispatching
        self._buffer_limit = dest.max_in_flight * dest.max_batch_records * _BUFFER_WINDOWS
        self._buffer_limit_bytes = dest.max_in_flight * dest.max_batch_bytes * _BUFFER_WINDOWS
        # Commit by time or by count, whichever comes first: at high throughput what finished
        # since the last commit is what a kill -9 delivers again, so bound it by count too.
        self._commit_every = max(
            dest.max_batch_records, dest.max_in_flight * dest.max_batch_records // 4
        )
        self._pending_bytes = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._deliverer: Deliverer | None = None
        self._handoff: HandOff | None = None
        self._log = log.bind(dest=dest.name)

    def request_stop(self) -> None:
        """Stop intake and begin draining; safe to call from a signal handler."""
        self._stop.set()

    async def run(self) -> None:
        """Run until stopped; raises `HifiError` if Kafka fails for longer than its clients retry."""
        async with contextlib.AsyncExitStack() as stack:
            if self.ops is not None:
                await stack.enter_async_context(self.ops.running())
            await kafka.ensure_topics(
                self._settings,
                [self.dest.retry_in_topic, self.dest.retry_out_topic, self.dest.dlq_topic],
                partitions=self.dest.internal_topic_partitions,
            )
            producer = await stack.enter_async_context(kafka.producer(self._settings))
            client = await stack.enter_async_context(http_client(self.dest, self._transport))
            self._handoff = HandOff(producer, self.dest)
            self._deliverer = Deliverer(client, self.dest, self._handoff)
            consumer = await stack.enter_async_context(self._consuming())
            _tune_gc()
            self._log.info("connector_started", topics=self._topics())
            try:
                await self._consume(consumer)
            finally:
                await self._drain(consumer)
        if self._failure is not None:
            raise self._failure

    def _topics(self) -> list[str]:
        return [*self.dest.source_topics, self.dest.retry_out_topic]

    @contextlib.asynccontextmanager
    async def _consuming(self) -> AsyncIterator[AIOKafkaConsumer]:
        consumer = kafka.consumer(
            self._settings,
            group_id=self.dest.connector_group,
            fetch_max_bytes=16 * 1024 * 1024,
            max_partition_fetch_bytes=max(1024 * 1024, self.dest.max_batch_bytes),
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        )
        consumer.subscribe(topics=self._topics(), listener=GroupListener(self, dest=self.dest.name))
        async with kafka.started(consumer, self._settings):
            self._consumer = consumer
            yield consumer

    # --- intake -------------------------------------------------------------------------

    async def _consume(self, consumer: AIOKafkaConsumer) -> None:
        loop = asyncio.get_running_loop()
        last_activity = loop.time()
        next_commit = loop.time() + self.dest.commit_interval_s
        while not self._stop.is_set() and self._failure is None:
            self._apply_backpressure(consumer)
            if self._paused:
                await self._wait_progress(_PAUSED_WAIT_S)
                fetched: dict[TopicPartition, list[Any]] = {}
            else:
                room = max(1, self._buffer_limit - len(self._pending))
                fetched = await consumer.getmany(timeout_ms=_POLL_TIMEOUT_MS, max_records=room)
            await self._intake_all(fetched)
            self._dispatch()
            now = loop.time()
            if fetched or self._tasks or self._pending:
                last_activity = now
            if now >= next_commit or self._tracker.finished_since_commit >= self._commit_every:
                await self._commit(consumer)
                next_commit = now + self.dest.commit_interval_s
            if self._until_idle_s is not None and now - last_activity >= self._until_idle_s:
                self._log.info("idle_exit", idle_s=self._until_idle_s)
                break

    async def _intake_all(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Take in a poll partition by partition, yielding to the event loop before each one.

        The yield lets aiokafka's fetcher send the next fetch (it waits until a poll has been
        consumed) and lets HTTP replies be read while this poll is parsed. Requests that finish
        meanwhile start only full batches, so a poll is not cut into small requests under live
        load. A rebalance can run in a yield; the rest of the poll is then dropped, as the new
        assignment fetches again from the committed offsets.
        """
        epoch = self._assignment_epoch
        self._taking_in = True
        try:
            for tp, records in fetched.items():
                await asyncio.sleep(0)
                if self._assignment_epoch != epoch:
                    return
                self._intake(tp, records)
        finally:
            self._taking_in = False

    def _intake(self, tp: TopicPartition, records: list[Any]) -> None:
        now_ms = time.time() * 1000
        dest = self.dest
        self._tracker.track(tp, map(_offset_of, records))
        parsed = parse_records(
            tp,
            records,
            id_field=dest.id_field,
            event_time_field=dest.event_time_field,
            max_bytes=dest.max_batch_bytes,
        )
        self._malformed.extend(parsed.malformed)
        if parsed.missing_id:
            metrics.MISSING_FIELDS.labels(dest.name, "id").inc(parsed.missing_id)
        if parsed.missing_time:
            metrics.MISSING_FIELDS.labels(dest.name, "event_time").inc(parsed.missing_time)
        events = parsed.events
        metrics.LAG_IN.labels(dest.name).observe_ages(now_ms, map(_event_time_of, events))
        self._pending.extend(events)
        self._pending_bytes += sum(map(len, map(_value_of, events)))

    def _apply_backpressure(self, consumer: AIOKafkaConsumer) -> None:
        """Pause every owned partition while the buffer is full (newly assigned ones too)."""
        full = (
            len(self._pending) >= self._buffer_limit
            or self._pending_bytes >= self._buffer_limit_bytes
        )
        if full:
            consumer.pause(*consumer.assignment())
        elif self._paused:
            consumer.resume(*consumer.paused())
        if full != self._paused:
            self._paused = full
            metrics.PAUSED.labels(self.dest.name).set(int(full))

    # --- bounded parallel delivery ------------------------------------------------------

    def _dispatch(self, *, full_batches_only: bool = False) -> None:
        """Start work while there is room: dead letters for malformed records first, then batches.

        With `full_batches_only`, a batch starts only if the buffer fills it to a bound.
        """
        while self._malformed and len(self._tasks) < self.dest.max_in_flight:
            chunk, self._malformed = self._malformed[:500], self._malformed[500:]
            partitions = _record_partition_counts(record for record, _ in chunk)
            self._spawn(self._dead_letter_records(chunk), partitions)
        while self._pending and len(self._tasks) < self.dest.max_in_flight:
            if full_batches_only and not self._fills_a_batch():
                return
            batch = take_batch(
                self._pending,
                max_records=self.dest.max_batch_records,
                max_bytes=self.dest.max_batch_bytes,
            )
            self._pending_bytes -= sum(map(len, map(_value_of, batch.events)))
            self._spawn(self._deliver(batch), _partition_counts(batch.events))

    def _fills_a_batch(self) -> bool:
        return (
            len(self._pending) >= self.dest.max_batch_records
            or self._pending_bytes >= self.dest.max_batch_bytes
        )

    def _spawn(self, work: Any, partitions: Counter[TopicPartition]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks.add(task)
        self._task_partitions[task] = partitions
        metrics.IN_FLIGHT.labels(self.dest.name).set(len(self._tasks))
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._task_partitions.pop(task, None)
        metrics.IN_FLIGHT.labels(self.dest.name).set(len(self._tasks))
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()
            self._log.error("delivery_failed", error=str(self._failure))
        if self._failure is None and not self._stop.is_set():
            self._dispatch(full_batches_only=self._taking_in)
        self._progress.set()

    async def _deliver(self, batch: Batch) -> None:
        assert self._deliverer is not None
        await self._deliverer.deliver(batch)
        for tp, offsets in _by_partition(batch.events):
            self._tracker.finish(tp, offsets)

    async def _dead_letter_records(self, chunk: list[tuple[KafkaRecord, MalformedRecord]]) -> None:
        assert self._handoff is not None
        for record, exc in chunk:
            await self._handoff.record_to_dlq(record, reason=exc.reason, error=str(exc))
            metrics.RECORDS.labels(self.dest.name, "dead_lettered").inc()
            self._tracker.finish(TopicPartition(record.topic, record.partition), (record.offset,))
        self._log.warning("malformed_dead_lettered", records=len(chunk), reason=chunk[0][1].reason)

    async def _wait_progress(self, timeout_s: float) -> None:
        self._progress.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._progress.wait(), timeout_s)

    async def _wait_idle(self, partitions: set[TopicPartition] | None, timeout_s: float) -> bool:
        """Wait until no in-flight work touches `partitions` (all when None); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            busy = [
                t
                for t, parts in self._task_partitions.items()
                if partitions is None or not partitions.isdisjoint(parts)
            ]
            if not busy:
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait(busy, timeout=remaining)

    # --- commits, rebalance, shutdown ---------------------------------------------------

    async def _commit(
        self, consumer: AIOKafkaConsumer, partitions: set[TopicPartition] | None = None
    ) -> None:
        owned = set(consumer.assignment())
        offsets = self._tracker.to_commit(owned if partitions is None else partitions & owned)
        if offsets:
            try:
                await consumer.commit(offsets)
            except KafkaError as exc:
                self._log.warning("commit_failed", error=str(exc), partitions=len(offsets))
                return
            self._tracker.committed(offsets)
        self._report_consumer_lag(consumer, owned)

    def _report_consumer_lag(self, consumer: AIOKafkaConsumer, owned: set[TopicPartition]) -> None:
        for tp in owned:
            highwater = consumer.highwater(tp)
            committed = self._tracker.last_committed(tp)
            if highwater is not None and committed is not None:
                metrics.CONSUMER_LAG.labels(self.dest.name, tp.topic, tp.partition).set(
                    max(0, highwater - committed)
                )

    def assigned(self, partitions: set[TopicPartition]) -> None:
        """Rebalance: partitions are ours; the connector is ready once it has an assignment."""
        self._assignment_epoch += 1
        if self.ops is not None:
            self.ops.ready = True

    async def release(self, partitions: set[TopicPartition]) -> None:
        """Rebalance: stop starting work for `partitions`, wait for theirs, commit, forget them."""
        self._assignment_epoch += 1
        self._pending = deque(e for e in self._pending if e.tp not in partitions)
        self._pending_bytes = sum(e.size_bytes for e in self._pending)
        self._malformed = [
            (r, x)
            for r, x in self._malformed
            if TopicPartition(r.topic, r.partition) not in partitions
        ]
        drained = await self._wait_idle(partitions, self.dest.shutdown_timeout_s)
        if self._consumer is not None:
            await self._commit(self._consumer, partitions)
        self._tracker.forget(partitions)
        for tp in partitions:
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(self.dest.name, tp.topic, str(tp.partition))
        self._log.info("partitions_released", partitions=len(partitions), drained=drained)

    async def _drain(self, consumer: AIOKafkaConsumer) -> None:
        """Stop intake, let in-flight work finish within the deadline, commit, then cancel the rest."""
        self._pending.clear()
        self._pending_bytes = 0
        drained = await self._wait_idle(None, self.dest.shutdown_timeout_s)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        with contextlib.suppress(KafkaError):
            await asyncio.shield(self._commit(consumer))
        if self.ops is not None:
            self.ops.ready = False
        self._log.info(
            "connector_stopped", drained=drained, outstanding=self._tracker.total_outstanding()
        )
