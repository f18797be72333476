"""The retrier daemon: hand-offs into tier topics, due events back to NAME.retry_out, expired ones to NAME.dlq."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from starlette.requests import Request

from config.catalog import Destination
from config.settings import KafkaSettings
from plumbing import kafka
from plumbing.errors import BrokerUnavailable, ConfigError
from plumbing.group import GroupListener
from plumbing.offsets import OffsetTracker
from plumbing.ops_http import OpsServer
from retrier import metrics, status
from retrier.holds import Holds
from retrier.plan import Outcome, Outgoing, plan_release, plan_routing
from retrier.status import Backlog, Measured, RecentFailures
from retrier.tiers import tier_of, tier_topic

log = structlog.get_logger(__name__)

GROUP_ID = "hifi.retrier"
# Per destination: its intake pauses while this many of its records are not acknowledged yet.
MAX_IN_FLIGHT_RECORDS = 2000
_POLL_TIMEOUT_MS = 200
_MAX_POLL_RECORDS = 500
_MAX_COMMIT_INTERVAL_S = 1.0
_BACKLOG_REFRESH_S = 3.0
_CONSUMER_OPTIONS: dict[str, Any] = {
    # A crashed member's partitions, and the due events they hold, move on within seconds.
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
    # A resumed partition is fetched within this long, even while a fetch of others waits for data.
    "fetch_max_wait_ms": 250,
    # A held partition is read again from its head at every resumption; keep those reads small.
    "max_partition_fetch_bytes": 1024 * 1024,
}


@dataclass(frozen=True, slots=True)
class _Source:
    """What a consumed topic is to the retrier: a destination's NAME.retry_in (tier None) or a tier."""

    dest: Destination
    tier: int | None


@dataclass(frozen=True, slots=True)
class _Work:
    """An in-flight produce: whose records, from which partitions, how many."""

    dest: str
    partitions: frozenset[TopicPartition]
    records: int


def _now_ms() -> int:
    return int(time.time() * 1000)


class Retrier:
    """Serves the retry tiers of some destinations; `run()` returns after a stop request or idle timeout."""

    def __init__(
        self,
        dests: Sequence[Destination],
        settings: KafkaSettings,
        *,
        metrics_port: int | None = None,
        until_idle_s: float | None = None,
        group_id: str = GROUP_ID,
        max_in_flight_records: int = MAX_IN_FLIGHT_RECORDS,
    ) -> None:
        if not dests:
            raise ConfigError("retrier: no destination to serve; add NAME.toml to the catalog")
        self.dests = {dest.name: dest for dest in dests}
        self.group_id = group_id
        self._settings = settings
        self._until_idle_s = until_idle_s
        self._max_in_flight = max_in_flight_records
        self._commit_interval_s = min(_MAX_COMMIT_INTERVAL_S, *(d.commit_interval_s for d in dests))
        self._shutdown_timeout_s = max(d.shutdown_timeout_s for d in dests)
        self.ops = (
            OpsServer(port=metrics_port, json_routes={"/status": self._status})
            if metrics_port is not None
            else None
        )
        self._stop = asyncio.Event()
        self._tracker = OffsetTracker()
        self._holds = Holds(self._on_due)
        self._recent = RecentFailures()
        self._sources: dict[str, _Source] = {}
        self._tasks: dict[asyncio.Task[None], _Work] = {}
        self._in_flight: Counter[str] = Counter()
        self._failure: BaseException | None = None
        self._assigned = False
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: kafka.Producer | None = None
        self._backlog: Backlog | None = None

    def request_stop(self) -> None:
        """Stop intake and begin draining; safe to call from a signal handler."""
        self._stop.set()

    async def run(self) -> None:
        """Run until stopped; raises `HifiError` if Kafka fails for longer than its clients retry."""
        async with contextlib.AsyncExitStack() as stack:
            if self.ops is not None:
                await stack.enter_async_context(self.ops.running())
            await self._create_topics()
            self._producer = await stack.enter_async_context(kafka.producer(self._settings))
            consumer = await stack.enter_async_context(self._consuming())
            backlog = Backlog(self._settings, self.group_id, self._measured())
            self._backlog = await stack.enter_async_context(backlog.measuring())
            await stack.enter_async_context(self._refreshing(self._backlog))
            log.info("retrier_started", dests=sorted(self.dests), group=self.group_id)
            try:
                await self._consume(consumer)
            finally:
                await self._drain(consumer)
        if self._failure is not None:
            raise self._failure

    async def _create_topics(self) -> None:
        for dest in self.dests.values():
            tiers = [tier_topic(dest.name, k) for k in range(len(dest.retry_tiers_s))]
            await kafka.ensure_topics(
                self._settings,
                [dest.retry_in_topic, dest.retry_out_topic, dest.dlq_topic, *tiers],
                partitions=dest.internal_topic_partitions,
            )

    def _sources_for(self, existing: Iterable[str]) -> dict[str, _Source]:
        """NAME.retry_in and the tier topics of each destination, including tiers left over from
        a longer `retry_tiers_s` (their events still wait for their due time)."""
        sources: dict[str, _Source] = {}
        existing = sorted(existing)
        for dest in self.dests.values():
            sources[dest.retry_in_topic] = _Source(dest, None)
            for k in range(len(dest.retry_tiers_s)):
                sources[tier_topic(dest.name, k)] = _Source(dest, k)
            for topic in existing:
                left_over = tier_of(dest.name, topic)
                if left_over is not None:
                    sources[topic] = _Source(dest, left_over)
        return sources

    def _measured(self) -> dict[str, Measured]:
        measured = {
            topic: Measured(source.dest.name, source.tier)
            for topic, source in self._sources.items()
            if source.tier is not None
        }
        measured.update({dest.dlq_topic: Measured(name, None) for name, dest in self.dests.items()})
        return measured

    @contextlib.asynccontextmanager
    async def _consuming(self) -> AsyncIterator[AIOKafkaConsumer]:
        consumer = kafka.consumer(self._settings, group_id=self.group_id, **_CONSUMER_OPTIONS)
        async with kafka.started(consumer, self._settings):
            try:
                self._sources = self._sources_for(await consumer.topics())
            except KafkaError as exc:
                raise BrokerUnavailable(f"kafka {self._settings.bootstrap}: {exc}") from exc
            consumer.subscribe(
                topics=sorted(self._sources), listener=GroupListener(self, component="retrier")
            )
            self._consumer = consumer
            try:
                yield consumer
            finally:
                self._consumer = None

    @contextlib.asynccontextmanager
    async def _refreshing(self, backlog: Backlog) -> AsyncIterator[None]:
        """Re-measure the backlog every few seconds in a task that ends with the block."""

        async def refresh_until_stopped() -> None:
            while not self._stop.is_set():
                await backlog.refresh(_now_ms())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), _BACKLOG_REFRESH_S)

        task = asyncio.create_task(refresh_until_stopped(), name="retrier-backlog")
        task.add_done_callback(self._on_task_done)
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- intake -------------------------------------------------------------------------

    async def _consume(self, consumer: AIOKafkaConsumer) -> None:
        loop = asyncio.get_running_loop()
        next_commit = loop.time() + self._commit_interval_s
        last_busy = loop.time()
        while not self._stop.is_set() and self._failure is None:
            fetched = await consumer.getmany(
                timeout_ms=_POLL_TIMEOUT_MS, max_records=_MAX_POLL_RECORDS
            )
            if fetched:
                self._intake(consumer, fetched)
            self._sync_pauses()
            now = loop.time()
            if fetched or self._tasks or len(self._holds) or not self._assigned:
                last_busy = now
            if now >= next_commit:
                await self._commit(consumer)
                next_commit = now + self._commit_interval_s
            if self._until_idle_s is not None and now - last_busy >= self._until_idle_s:
                log.info("idle_exit", idle_s=self._until_idle_s)
                break

    def _intake(self, consumer: AIOKafkaConsumer, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Plan what each fetched record becomes, hold partitions at their first record not due,
        and start producing, one task per destination."""
        now_ms = _now_ms()
        planned: dict[str, list[Outgoing]] = defaultdict(list)
        for tp, fetched_records in fetched.items():
            source = self._sources[tp.topic]
            held = self._holds.head(tp)
            if held is not None:  # a fetch that raced the hold: read it again when the hold ends
                consumer.seek(tp, held.offset)
                continue
            if source.tier is None:
                outgoing = plan_routing(
                    source.dest, tp, fetched_records, now_ms=now_ms, recent=self._recent
                )
            else:
                release = plan_release(source.dest, source.tier, tp, fetched_records, now_ms=now_ms)
                outgoing = release.due
                if release.head is not None:
                    self._holds.hold(consumer, tp, release.head, now_ms)
            self._tracker.track(tp, [item.offset for item in outgoing])
            planned[source.dest.name].extend(outgoing)
        for dest_name, outgoing in planned.items():
            if outgoing:
                self._spawn(dest_name, outgoing)

    def _sync_pauses(self) -> None:
        """Pause exactly the owned partitions that are held or whose destination is at its bound."""
        consumer = self._consumer
        if consumer is None:
            return
        full = {name for name, count in self._in_flight.items() if count >= self._max_in_flight}
        owned = consumer.assignment()
        want = {
            tp for tp in owned if tp in self._holds or self._sources[tp.topic].dest.name in full
        }
        have = consumer.paused()
        if want - have:
            consumer.pause(*(want - have))
        if have - want:
            consumer.resume(*(have - want))

    def _on_due(self, tp: TopicPartition) -> None:
        self._sync_pauses()

    # --- bounded produces -----------------------------------------------------------------

    def _spawn(self, dest_name: str, outgoing: list[Outgoing]) -> None:
        task = asyncio.create_task(self._produce(dest_name, outgoing), name=f"retrier-{dest_name}")
        self._tasks[task] = _Work(dest_name, frozenset(o.source for o in outgoing), len(outgoing))
        self._in_flight[dest_name] += len(outgoing)
        metrics.IN_FLIGHT.labels(dest_name).set(self._in_flight[dest_name])
        task.add_done_callback(self._on_task_done)

    async def _produce(self, dest_name: str, outgoing: list[Outgoing]) -> None:
        """Produce and wait for the broker's acknowledgement; only then are the sources done."""
        assert self._producer is not None
        with structlog.contextvars.bound_contextvars(dest=dest_name):
            await self._producer.send_all([item.as_record() for item in outgoing])
        now_ms = _now_ms()
        for item in outgoing:
            self._tracker.finish(item.source, (item.offset,))
            item.count(dest_name, now_ms)
        expired = [item for item in outgoing if item.outcome is Outcome.EXPIRED]
        if expired:
            log.info("expired", dest=dest_name, events=len(expired), first=expired[0].why)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        work = self._tasks.pop(task, None)
        if work is not None:
            self._in_flight[work.dest] -= work.records
            metrics.IN_FLIGHT.labels(work.dest).set(self._in_flight[work.dest])
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()
            log.error("retrier_failed", error=str(self._failure))
        self._sync_pauses()

    async def _wait_idle(self, partitions: set[TopicPartition] | None, timeout_s: float) -> bool:
        """Wait until no in-flight produce touches `partitions` (all when None); False on timeout."""
        busy = [
            task
            for task, work in self._tasks.items()
            if partitions is None or not partitions.isdisjoint(work.partitions)
        ]
        if not busy:
            return True
        _, pending = await asyncio.wait(busy, timeout=timeout_s)
        return not pending

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
                log.warning("commit_failed", error=str(exc), partitions=len(offsets))
                return
            self._tracker.committed(offsets)
        self._export_oldest()

    def _export_oldest(self) -> None:
        now_ms = _now_ms()
        heads = list(self._holds.heads())
        for name in self.dests:
            age_s = status.oldest_age_s((h for h in heads if h.dest == name), now_ms)
            metrics.OLDEST_WAITING_AGE.labels(name).set(age_s or 0.0)

    def assigned(self, partitions: set[TopicPartition]) -> None:
        """Rebalance: partitions are ours; the retrier is ready once it has an assignment."""
        self._assigned = True
        if self.ops is not None:
            self.ops.ready = True

    async def release(self, partitions: set[TopicPartition]) -> None:
        """Rebalance: end holds, wait for in-flight produces of `partitions`, commit, forget them."""
        self._holds.drop(partitions)
        drained = await self._wait_idle(partitions, self._shutdown_timeout_s)
        if self._consumer is not None:
            await self._commit(self._consumer, partitions)
        self._tracker.forget(partitions)
        log.info("partitions_released", partitions=len(partitions), drained=drained)

    async def _drain(self, consumer: AIOKafkaConsumer) -> None:
        """Stop intake, let in-flight produces finish within the deadline, commit, cancel the rest."""
        self._holds.clear()
        drained = await self._wait_idle(None, self._shutdown_timeout_s)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        with contextlib.suppress(KafkaError):
            await asyncio.shield(self._commit(consumer))
        if self.ops is not None:
            self.ops.ready = False
        log.info("retrier_stopped", drained=drained, outstanding=self._tracker.total_outstanding())

    async def _status(self, request: Request) -> dict[str, Any]:
        return status.document(
            sorted(self.dests),
            backlog=self._backlog,
            heads=self._holds.heads(),
            recent=self._recent,
            now_ms=_now_ms(),
        )
