"""The connector daemon: a destination's records become batches, delivered over HTTP by a `PartitionWorker`."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import structlog

from config.destination import Destination
from config.topics import ensure_destination_topics
from connector import bearer, metrics, status_page
from connector.concurrency import Limiter
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.handler import DeliveryHandler
from connector.intake import consumer_options
from connector.rate_limits import RateLimits
from connector.sender import opened_sender
from hifi import audit
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import Producer, open_producer
from hifi.kafka.reach import KafkaReach
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache import redis_hash
from hifi.lookup_cache.redis_hash import RedisSettings
from hifi.lookup_cache.refresh_ahead import RefreshAheadCache
from hifi.ops_http import DEFAULT_HOST, OpsServer
from hifi.worker import PartitionWorker, WorkerOptions
from tenants.keys import tenants_key
from tenants.lookups import snapshot_path as tenant_snapshot_path
from tenants.lookups import tenant_cache
from tenants.route import Route

if TYPE_CHECKING:
    from hifi.schema_registry import Decoding

log = structlog.get_logger(__name__)

# Cyclic GC: a young-generation pass every 10,000 allocations instead of 700. At one Event, one
# ConsumerRecord and their lists per record, the default ran a pass every few hundred records,
# with long pauses; start-up objects are frozen out of every pass. Not higher: at 100,000 the
# reference cycles of failed attempts (exceptions holding frames that hold request bodies)
# lived long enough to multiply the connector's peak RSS under a few 503s.
_GC_GEN0_THRESHOLD = 10_000
_PRODUCER_BATCH_BYTES = 1024 * 1024  # per partition
SETTLING_PER_SLOT = 4  # units awaiting their facts' acknowledgement, per in-flight slot


def _producer(
    settings: KafkaSettings, reach: KafkaReach
) -> contextlib.AbstractAsyncContextManager[Producer]:
    """The connector's producer, for hand-offs, dead letters and audit facts.

    Hand-offs, dead letters and a partial batch's audit facts are awaited inside a unit of work
    that holds an in-flight slot; a full batch's facts after the unit gave up its slot
    (`_Delivery._deliver`, `hifi.worker.Work`). No linger: it only added its wait to each unit;
    the records of one write are appended before the sender runs, so they are batched all the
    same, and a linger measured no better once facts no longer held a slot. Batches of up to
    1 MiB: at aiokafka's 16 KiB a fact of 500 events did not fit beside another, so the facts
    of concurrent units waited for each other's sends (`docs/performance.md` has the figures).
    """
    return open_producer(settings, reach=reach, linger_ms=0, max_batch_size=_PRODUCER_BATCH_BYTES)


def worker_options(
    dest: Destination, *, until_idle_s: float | None, limit: Callable[[], int] | None = None
) -> WorkerOptions:
    return WorkerOptions(
        group_id=dest.connector_group,
        max_in_flight=dest.max_in_flight,
        limit=limit,
        commit_interval_s=dest.commit_interval_s,
        # At high throughput what finished since the last commit is what a kill -9 delivers
        # again, so commit by count too.
        commit_every_records=max(
            dest.max_batch_records, dest.max_in_flight * dest.max_batch_records // 4
        ),
        # A request gives up its slot while its audit facts wait for the broker (a produce
        # round trip and the sends queued before it); with only `max_in_flight` of them
        # allowed to wait, the acknowledgements, not the destination, bounded the requests/s.
        max_settling=SETTLING_PER_SLOT * dest.max_in_flight,
        shutdown_timeout_s=dest.shutdown_timeout_s,
        until_idle_s=until_idle_s,
        consumer_options=consumer_options(dest),
        log_context={"dest": dest.name},
    )


class Connector:
    """Delivers one destination's topics; `run()` returns after a stop request or idle timeout."""

    def __init__(
        self,
        dest: Destination,
        settings: KafkaSettings,
        *,
        metrics_port: int | None = None,
        metrics_host: str = DEFAULT_HOST,
        until_idle_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        audit_topic: str | None = None,
        redis: RedisSettings | None = None,
        state_dir: Path | None = None,
    ) -> None:
        """With `[lookups]`, tenant entries come from `redis` (default: `HIFI_REDIS_URL`) and
        their snapshot goes under `state_dir` (default: `HIFI_STATE_DIR`)."""
        self.dest = dest
        self._settings = settings
        self._transport = transport
        #: where the audit facts go (`HIFI_AUDIT_TOPIC` by default); None: no audit trail
        self.audit_topic = (audit_topic or audit.audit_topic()) if dest.accounting.audit else None
        self.ops = OpsServer.on_port(metrics_port, host=metrics_host, component="connector")
        self._redis: RedisSettings | None = None
        self._snapshot: Path | None = None
        if dest.lookups is not None:
            self._redis = redis or RedisSettings.from_env()
            self._snapshot = tenant_snapshot_path(dest.name, state_dir)
        #: the tenant lookups of a destination with `[lookups]`, once running
        self.routes: RefreshAheadCache[Route] | None = None
        metrics.create_series(
            dest.name, audit=self.audit_topic is not None, lookups=dest.lookups is not None
        )
        self.limiter = Limiter.for_destination(dest)  # the in-flight bound, adapted per RTT
        self._rate_limits: RateLimits | None = None  # the deliverer's, once it runs
        options = worker_options(dest, until_idle_s=until_idle_s, limit=self._in_flight_bound)
        self.reach = KafkaReach("connector", ops=self.ops)  # not ready while Kafka does not answer
        self._worker = PartitionWorker(settings, options, ops=self.ops, reach=self.reach)
        self._stopping = asyncio.Event()

    def request_stop(self) -> None:
        """Stop intake and begin draining; safe to call from a signal handler."""
        self._stopping.set()
        self._worker.request_stop()

    def _in_flight_bound(self) -> int:
        """Units of work to run now: the concurrency limit, and beside it the units waiting for
        rate-limit tokens (a unit that waits sends nothing, so it takes no request's place)."""
        waiting = 0 if self._rate_limits is None else self._rate_limits.waiting
        return self.limiter.limit() + waiting

    async def run(self) -> None:
        """Run until stopped, waiting for Kafka while it does not answer (`KafkaReach`);
        raises `HifiError` on what waiting cannot mend (a configuration error, a refusal)."""
        with structlog.contextvars.bound_contextvars(dest=self.dest.name):
            await self.reach.run_daemon(self.ops, self._session, stop=self._stopping)

    async def _session(self) -> None:
        """Start the clients, deliver until stopped; Kafka not answering ends it (run again)."""
        dest = self.dest
        async with contextlib.AsyncExitStack() as stack:
            routes = await self._tenant_routes(stack)
            log.info("kafka_connecting", **self._settings.describe())
            existing = await ensure_destination_topics(self._settings, dest)
            for topic in sorted(set(dest.source_topics) - existing):
                log.warning(
                    "source_topic_missing",
                    topic=topic,
                    hint="nothing is delivered from it until it exists; check source_topics",
                )
            producer = await stack.enter_async_context(_producer(self._settings, self.reach))
            trail = await self._audit_trail(producer)
            sender = await stack.enter_async_context(opened_sender(dest, self._transport))
            auth = await stack.enter_async_context(bearer.started(dest))
            diverter = Diverter(producer, dest, trail=trail)
            deliverer = Deliverer(
                sender, dest, diverter, trail=trail, auth=auth, limiter=self.limiter
            )
            self._rate_limits = deliverer.rate_limits
            delivery = DeliveryHandler(
                dest,
                deliverer,
                diverter,
                route_of=None if routes is None else routes.get,
                highwater=self._worker.highwater,
                decoding=await self._decoding(stack),
            )
            if self.ops is not None:
                lookups = None if routes is None else routes.status
                page = status_page.page(
                    dest, self.ops, delivery.snapshot, lookups, self._worker.started_over
                )
                self.ops.serve_json("/status", page)
            if routes is not None and not await self._loaded(routes):
                return
            _tune_gc()
            topics = [*dest.source_topics, dest.retry_out_topic]
            log.info("connector_started", dest=dest.name, topics=topics, audit=self.audit_topic)
            await self._worker.run(delivery, topics=topics)
            await deliverer.breakers.flush()  # the last breaker facts, before the producer closes

    async def _decoding(self, stack: contextlib.AsyncExitStack) -> Decoding | None:
        """With `[decode]`, the decoder of every topic the connector reads; None without."""
        dest = self.dest
        if dest.decode is None:
            return None
        from hifi.schema_registry import Decoding, RecordDecoder  # heavy: only when decoding

        proxy = None if dest.proxy is None else dest.proxy.get_secret_value()
        decoder = await stack.enter_async_context(RecordDecoder(dest.decode.registry(proxy)))
        return Decoding(decoder, [*dest.source_topics, dest.retry_out_topic])

    async def _tenant_routes(
        self, stack: contextlib.AsyncExitStack
    ) -> RefreshAheadCache[Route] | None:
        """With `[lookups]`: the tenant routes, loading in the background from here on (the
        ops server is not ready until they are); None without."""
        if self._redis is None:
            return None
        source = await stack.enter_async_context(
            redis_hash.connected(self._redis, tenants_key(self.dest.name))
        )
        routes = tenant_cache(self.dest, source, snapshot=self._snapshot)
        await stack.enter_async_context(routes.running())
        if self.ops is not None:
            self.ops.require(routes.readiness)
        self.routes = routes
        return routes

    async def _loaded(self, routes: RefreshAheadCache[Route]) -> bool:
        """Wait until the routes are loaded (from Redis or the snapshot); False when a stop
        came first. No record is read before: every event finds its tenant's entry in memory."""
        if not routes.loaded.is_set():
            log.info("waiting_for_lookups", detail=routes.readiness().detail)
            loaded = asyncio.ensure_future(routes.loaded.wait())
            stopping = asyncio.ensure_future(self._stopping.wait())
            try:
                await asyncio.wait([loaded, stopping], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in (loaded, stopping):
                    waiter.cancel()
        if routes.loaded.is_set():
            log.info("lookups_loaded", detail=routes.readiness().detail)
        return routes.loaded.is_set()

    async def _audit_trail(self, producer: Producer) -> audit.AuditTrail | None:
        """The destination's audit trail on the connector's producer, its topic created when
        missing (an existing one keeps its configuration); None with `audit = false`."""
        if self.audit_topic is None:
            return None
        await kafka_admin.ensure_topics(
            self._settings,
            [self.audit_topic],
            partitions=self.dest.internal_topic_partitions,
            retention_ms=audit.AUDIT_RETENTION_MS,
        )
        return audit.AuditTrail(
            producer,
            topic=self.audit_topic,
            dest=self.dest.name,
            node=audit.node_name("connector"),
            replica=self._settings.instance_id,
        )


def _tune_gc() -> None:
    """Freeze what start-up allocated and collect the young generation less often (process-wide)."""
    gen0, gen1, gen2 = gc.get_threshold()
    if gen0 >= _GC_GEN0_THRESHOLD:
        return  # done already (a second connector in this process)
    gc.collect()
    gc.freeze()
    gc.set_threshold(_GC_GEN0_THRESHOLD, gen1, gen2)
