"""The retrier daemon: hand-offs into tier topics, due events back to NAME.retry_out, expired ones to NAME.dlq."""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from aiokafka import TopicPartition
from starlette.requests import Request
from starlette.routing import BaseRoute

from config.destination import Destination
from config.retry_age import tiers_warning
from config.topics import ensure_destination_topics
from hifi import audit
from hifi.audit import Seen
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import Producer, RecordWriter, open_producer
from hifi.kafka.reach import KafkaReach
from hifi.kafka.settings import KafkaSettings
from hifi.named import by_name
from hifi.ops_http import DEFAULT_HOST, JsonProvider, OpsServer
from hifi.vocabulary import Outcome, Reason
from hifi.worker import PartitionHandler, PartitionWorker, Work, WorkerOptions
from retrier import metrics, status
from retrier.dashboard.access import Access, is_loopback
from retrier.dashboard.api import Dashboard
from retrier.dashboard.auditor_feed import AuditorFeed
from retrier.dashboard.marks_feed import following_marks
from retrier.dashboard.replay_jobs import ReplayJobs
from retrier.defaults import RETRIER_GROUP_ID
from retrier.dlq.indexing import indexing
from retrier.holds import Holds
from retrier.plan import Outgoing, plan_reoffers, plan_routing
from retrier.status import Backlog, RecentFailures, RecentOutcomes, measured_topics
from retrier.tiers import Source, sources_for, tier_topic

log = structlog.get_logger(__name__)

# Per destination: its intake pauses while this many of its records are not acknowledged yet.
MAX_IN_FLIGHT_RECORDS = 2000
_PRODUCES_PER_DEST = 8  # produce requests in flight per destination, at most
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
        metrics_host: str = DEFAULT_HOST,
        until_idle_s: float | None = None,
        group_id: str = RETRIER_GROUP_ID,
        max_in_flight_records: int = MAX_IN_FLIGHT_RECORDS,
        audit_topic: str | None = None,
        dashboard: DashboardOptions | None = None,
    ) -> None:
        self.dests = by_name(
            dests, none="retrier: no destination to serve; add NAME.toml to the catalog"
        )
        self.group_id = group_id
        self._settings = settings
        self._max_in_flight_records = max_in_flight_records
        #: where the audit facts go (`HIFI_AUDIT_TOPIC` by default), for destinations that audit
        self.audit_topic = audit_topic or audit.audit_topic()
        self.ops = OpsServer.on_port(metrics_port, host=metrics_host, component="retrier")
        self._dashboard = dashboard or DashboardOptions()
        self._access = Access(self._dashboard.token, loopback=is_loopback(metrics_host))
        self._auditor = AuditorFeed.at(self._dashboard.auditor_url)
        for dest in dests:
            metrics.create_series(
                dest.name,
                len(dest.retry_tiers_s),
                audit=dest.accounting.audit,
                max_retry_age_s=dest.max_retry_age_s,
            )
            if (warning := tiers_warning(dest)) is not None:
                log.warning("retry_tiers_never_run", dest=dest.name, detail=warning)
        options = WorkerOptions(
            group_id=group_id,
            max_in_flight=_PRODUCES_PER_DEST * len(dests),
            commit_interval_s=min(_MAX_COMMIT_INTERVAL_S, *(d.commit_interval_s for d in dests)),
            shutdown_timeout_s=max(d.shutdown_timeout_s for d in dests),
            until_idle_s=until_idle_s,
            consumer_options=_CONSUMER_OPTIONS,
            log_context={"component": "retrier"},
        )
        self.reach = KafkaReach("retrier")  # whether Kafka answers; not ready while it waits
        if self.ops is not None:
            self.ops.require(self.reach.readiness)
        self._worker = PartitionWorker(settings, options, ops=self.ops, reach=self.reach)

    def request_stop(self) -> None:
        """Stop intake and begin draining; safe to call from a signal handler."""
        self._worker.request_stop()

    async def run(self) -> None:
        """Run until stopped, waiting for Kafka while it does not answer (`KafkaReach`);
        raises `HifiError` on what waiting cannot mend (a configuration error, a refusal)."""
        async with contextlib.AsyncExitStack() as stack:
            if self.ops is not None:
                await stack.enter_async_context(self.ops.running())
            await self.reach.serving(self._session, stop=self._worker.stopping)

    async def _session(self) -> None:
        """Start the clients, move records until stopped; Kafka not answering ends it."""
        async with contextlib.AsyncExitStack() as stack:
            log.info("kafka_connecting", **self._settings.describe())
            existing = await self._create_topics()
            sources = sources_for(self.dests.values(), existing)
            producer = await stack.enter_async_context(
                open_producer(self._settings, reach=self.reach)
            )
            routing = _Routing(
                sources,
                producer,
                self._worker.wake,
                self._max_in_flight_records,
                trails=self._audit_trails(producer),
            )
            backlog = await stack.enter_async_context(
                status.measuring(
                    self._settings,
                    self.group_id,
                    measured_topics(sources, self.group_id),
                    every_s=_BACKLOG_REFRESH_S,
                )
            )
            if self.ops is not None:
                tiers = _tiers_document(sorted(self.dests), backlog, routing)
                self.ops.serve_json("/status", _status_page(tiers))
                self.ops.mount(await self._dashboard_routes(stack, tiers))
            log.info("retrier_started", dests=sorted(self.dests), group=self.group_id)
            await self._worker.run(routing, topics=sorted(sources))

    async def _dashboard_routes(
        self, stack: contextlib.AsyncExitStack, tiers: Callable[[], dict[str, Any]]
    ) -> list[BaseRoute]:
        """The dashboard on the ops port: an index of every DLQ, kept current by a task that
        ends with the run, and the replays started from the page."""
        dests = list(self.dests.values())
        indexes = await stack.enter_async_context(
            indexing(self._settings, dests, spill_dir=self._dashboard.index_dir)
        )
        await stack.enter_async_context(following_marks(self._settings, dests, indexes))
        jobs = ReplayJobs(
            self._settings,
            self.dests,
            mark=lambda name: indexes[name].mark_replayed,
        )
        await stack.enter_async_context(jobs.running())

        dashboard = Dashboard(
            dests=self.dests,
            settings=self._settings,
            access=self._access,
            status_document=tiers,
            indexes=indexes,
            jobs=jobs,
            auditor=self._auditor,
            runbook_url=self._dashboard.runbook_url,
        )
        return dashboard.routes()

    async def _create_topics(self) -> set[str]:
        """Create every destination's topics; returns the topics of the cluster."""
        existing: set[str] = set()
        for dest in self.dests.values():
            tiers = [tier_topic(dest.name, k) for k in range(len(dest.retry_tiers_s))]
            existing = await ensure_destination_topics(self._settings, dest, tiers)
        auditing = [dest for dest in self.dests.values() if dest.accounting.audit]
        if auditing:  # an existing audit topic keeps its configuration
            existing = await kafka_admin.ensure_topics(
                self._settings,
                [self.audit_topic],
                partitions=max(dest.internal_topic_partitions for dest in auditing),
                retention_ms=audit.AUDIT_RETENTION_MS,
            )
        return existing

    def _audit_trails(self, producer: Producer) -> dict[str, audit.AuditTrail]:
        """An audit trail per destination that audits (`[accounting] audit`), on one producer."""
        node = audit.node_name("retrier")
        return {
            name: audit.AuditTrail(producer, topic=self.audit_topic, dest=name, node=node)
            for name, dest in self.dests.items()
            if dest.accounting.audit
        }


class _Routing(PartitionHandler):
    """What the retrier does with its records: route hand-offs to tiers, re-offer or expire due ones."""

    def __init__(
        self,
        sources: Mapping[str, Source],
        producer: RecordWriter,
        wake: Callable[[], None],
        max_in_flight_records: int,
        *,
        trails: Mapping[str, audit.AuditTrail],
    ) -> None:
        self._sources = sources
        self._producer = producer
        self._trails = trails
        self._max_in_flight_records = max_in_flight_records
        self.holds = Holds(wake)
        self.recent = RecentFailures()
        self.outcomes = RecentOutcomes()
        self._planned: dict[str, list[Outgoing]] = defaultdict(list)
        self._in_flight: Counter[str] = Counter()

    def take(self, tp: TopicPartition, records: list[Any]) -> int | None:
        """Plan each record; a tier partition is held at its first record that is not due."""
        held = self.holds.head(tp)
        if held is not None:  # a fetch that raced the hold: read it again when the hold ends
            return held.offset
        source, now_ms = self._sources[tp.topic], _now_ms()
        if source.tier is None:
            outgoing = plan_routing(source.dest, tp, records, now_ms=now_ms, recent=self.recent)
            resume = None
        else:
            reoffers = plan_reoffers(source.dest, source.tier, tp, records, now_ms=now_ms)
            outgoing, head = reoffers.due, reoffers.head
            resume = None if head is None else head.offset
            if head is not None:
                self.holds.hold(tp, head, now_ms)
        if outgoing:
            self._planned[source.dest.name].extend(outgoing)
        return resume

    def next_work(self, *, poll_open: bool) -> Work | None:
        """One produce per destination for what a whole poll planned for it."""
        if poll_open or not self._planned:
            return None
        dest_name, outgoing = self._planned.popitem()
        self._in_flight[dest_name] += len(outgoing)
        metrics.IN_FLIGHT.labels(dest_name).set(self._in_flight[dest_name])
        offsets: dict[TopicPartition, list[int]] = defaultdict(list)
        for item in outgoing:
            offsets[item.source].append(item.offset)
        return Work(self._produce(dest_name, outgoing), offsets)

    def held(self, owned: set[TopicPartition]) -> set[TopicPartition]:
        """Held tier partitions, and every partition of a destination at its in-flight bound."""
        full = {name for name, n in self._in_flight.items() if n >= self._max_in_flight_records}
        return {tp for tp in owned if tp in self.holds or self._sources[tp.topic].dest.name in full}

    @property
    def busy(self) -> bool:
        return bool(self._planned) or len(self.holds) > 0

    def drop(self, partitions: set[TopicPartition]) -> None:
        self.holds.drop(partitions)
        for dest_name, outgoing in list(self._planned.items()):
            kept = [item for item in outgoing if item.source not in partitions]
            if kept:
                self._planned[dest_name] = kept
            else:
                del self._planned[dest_name]

    def after_commit(self, lag_records: Mapping[TopicPartition, int]) -> None:
        now_ms = _now_ms()
        heads = list(self.holds.heads())
        for name in {source.dest.name for source in self._sources.values()}:
            age_s = status.oldest_age_s((h for h in heads if h.dest == name), now_ms)
            metrics.OLDEST_WAITING_AGE.labels(name).set(age_s or 0.0)

    async def _produce(self, dest_name: str, outgoing: list[Outgoing]) -> None:
        """Produce and wait for the broker's acknowledgement, then for the audit facts of the
        re-offers and expiries; only then are the sources done."""
        try:
            with structlog.contextvars.bound_contextvars(dest=dest_name):
                await self._producer.send_all([item.as_record() for item in outgoing])
                trail = self._trails.get(dest_name)
                if trail is not None:
                    await _record_facts(trail, outgoing)
        finally:
            self._in_flight[dest_name] -= len(outgoing)
            metrics.IN_FLIGHT.labels(dest_name).set(self._in_flight[dest_name])
        now_ms = _now_ms()
        for item in outgoing:
            item.count(dest_name, now_ms)
        expired = [item for item in outgoing if item.outcome is Outcome.DEAD_LETTERED]
        reoffered = sum(1 for item in outgoing if item.outcome is Outcome.RE_OFFERED)
        self.outcomes.note(dest_name, now_ms, reoffered=reoffered, expired=len(expired))
        if expired:
            log.info(
                "expired",
                dest=dest_name,
                events=len(expired),
                first=expired[0].why,
                reason=expired[0].reason,
            )


async def _record_facts(trail: audit.AuditTrail, outgoing: list[Outgoing]) -> None:
    """The facts of one acknowledged produce: its re-offers, its expiries by reason (routing
    has none)."""
    reoffered: list[Seen] = []
    dead: dict[Reason, list[Seen]] = defaultdict(list)
    for item in outgoing:
        if item.event is None:
            continue
        if item.outcome is Outcome.RE_OFFERED:
            reoffered.append(item.event)
        elif item.outcome is Outcome.DEAD_LETTERED:
            dead[item.reason or Reason.EXPIRED].append(item.event)
    await trail.record(Outcome.RE_OFFERED, reoffered)
    for reason, seen in dead.items():
        await trail.record(Outcome.DEAD_LETTERED, seen, reason=reason)


@dataclass(frozen=True)
class DashboardOptions:
    """The dashboard's settings: its token (None: read-only), the auditor it shows the loss and
    lag of (None: no such panel), where the DLQ index keeps its search text (None: a temporary
    directory)."""

    token: str | None = None
    auditor_url: str | None = None
    index_dir: Path | None = None
    runbook_url: str | None = None  # where docs/alerts.md is served: panels link their alerts


def _tiers_document(
    dests: list[str], backlog: Backlog, routing: _Routing
) -> Callable[[], dict[str, Any]]:
    """The `/status` JSON of the tiers as it is now, for `/status` and the dashboard."""

    def document() -> dict[str, Any]:
        return status.document(
            dests,
            backlog=backlog,
            heads=routing.holds.heads(),
            recent=routing.recent,
            now_ms=_now_ms(),
            outcomes=routing.outcomes,
        )

    return document


def _status_page(tiers: Callable[[], dict[str, Any]]) -> JsonProvider:
    async def page(request: Request) -> dict[str, Any]:
        return tiers()

    return page
