"""What the connector does with the records of a poll: parse, hold, cut into batches, deliver, divert.

The `PartitionHandler` of `connector.daemon`: the worker (`hifi.worker`) polls, starts the units
this handler gives it and commits; the handler owns the events in hand and the gate the
circuit breakers put on requests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import structlog
from aiokafka import TopicPartition

from config.destination import Destination
from config.parsing import parse
from connector import metrics, status_page
from connector.breaker import Breaker
from connector.delivery import Deliverer
from connector.divert import Diversion, Diverter, Unreadable
from connector.intake import BUFFER_WINDOWS, intake_limit
from connector.linger import LingerSchedule
from connector.rebatch import Batch, Pending, PendingEvents, offsets_of
from connector.tenant_pending import TenantPending
from hifi.redaction import short_error
from hifi.vocabulary import Outcome, Reason
from hifi.worker import PartitionHandler, Work
from tenants.route import Route

if TYPE_CHECKING:  # imported by the daemon only for a destination with [decode]: it is heavy
    from hifi.schema_registry import Decoding

log = structlog.get_logger(__name__)

_MALFORMED_PER_WORK = 500
BEHIND_SHARE = 0.75  # of the buffer's limit: a tenant destination is behind from here...
CAUGHT_UP_SHARE = 0.25  # ...until its buffer falls below this
_event_time_of = attrgetter("event_time_ms")


class DeliveryHandler(PartitionHandler):
    """What the connector does with its records: parse, re-batch, deliver, dead-letter the
    unreadable; with tenant lookups, cut batches per tenant and divert what has no route.

    The circuit breakers (`connector.breaker`) gate the requests: while the destination's is
    open or half-open no batch is cut and intake is paused (the events stay in Kafka); once its
    backoff has elapsed the next unit is its probe. A tenant route's open breaker sends that
    route's batches to the retrier without a request, and its probe goes first when due."""

    def __init__(
        self,
        dest: Destination,
        deliverer: Deliverer,
        diverter: Diverter,
        *,
        route_of: Callable[[str], Route | None] | None = None,
        highwater: Callable[[TopicPartition], int | None] | None = None,
        decoding: Decoding | None = None,
    ) -> None:
        """`route_of`: a tenant's route (the lookup cache's `get`), for a destination with
        `[lookups]`; `highwater`: a partition's high watermark as of its last fetch (the
        worker's), to tell records still waiting in Kafka; `decoding`: with `[decode]`."""
        self._dest = dest
        self._decoding = decoding
        self._deliverer = deliverer
        self._diverter = diverter
        self._pending: Pending = PendingEvents(
            max_records=dest.max_batch_records, max_bytes=dest.max_batch_bytes
        )
        self._limit_records = intake_limit(dest)
        self._window_records = dest.max_in_flight * dest.max_batch_records
        window_bytes = dest.max_in_flight * dest.max_batch_bytes
        self._limit_bytes = window_bytes * BUFFER_WINDOWS
        # a tenant destination's linger, longer while its round of tenants comes late
        floor_s = 0.0 if dest.lookups is None else dest.lookups.max_linger_s
        self.linger = LingerSchedule(floor_s, dest.accounting.lag_sla_s / 2)
        if dest.lookups is not None:
            metrics.LINGER.labels(dest.name).set_function(lambda: self.linger.linger_ms() / 1000)
        if route_of is not None and dest.lookups is not None:
            self._pending = TenantPending(
                route_of,
                tenant_field=dest.lookups.tenant_field,
                max_records=dest.max_batch_records,
                max_bytes=dest.max_batch_bytes,
                holds_back=deliverer.rate_limits.holds_back,  # rate limits
                linger=self.linger,
            )
            # batches are cut per tenant: the tail of tenants needs room to fill theirs; at least
            # a window of full batches (its default of 64 in flight holds it at buffer_bytes)
            self._limit_records = max(self._window_records, dest.lookups.buffer_records)
            self._limit_bytes = max(window_bytes, dest.lookups.buffer_bytes)
        self._malformed: list[Unreadable] = []
        self._paused = False
        self._behind = False  # a backlog: see `_backlog`
        self._highwater = highwater
        self._unread: dict[TopicPartition, int] = {}  # records in Kafka past those taken in
        # keeping up, a tenant destination's batches fill while they linger: a request need
        # not keep its slot until its audit facts are acknowledged to let the next one grow
        self._lingers = dest.lookups is not None and dest.lookups.max_linger_s > 0
        self._in_flight = metrics.IN_FLIGHT.labels(dest.name)
        self._in_flight_requests = 0
        self._lag_in = metrics.LAG_IN.labels(dest.name)
        self._lag_records: dict[TopicPartition, int] = {}
        self._progress = status_page.Progress(dest.name)
        self._breakers = deliverer.breakers
        self._breaker = deliverer.breakers.destination
        self._rate_limits = deliverer.rate_limits

    async def prepare(self, tp: TopicPartition, records: list[Any]) -> list[Any] | None:
        """With `[decode]`, the records decoded (None while the registry does not answer)."""
        decoding = self._decoding
        return records if decoding is None else await decoding.prepare(tp.topic, records)

    def take(self, tp: TopicPartition, records: list[Any]) -> None:
        dest = self._dest
        now_ms = time.time() * 1000
        parsed = parse(dest, tp, records, taken_ms=int(now_ms))
        self._malformed.extend(
            Unreadable(record, exc.reason, short_error(str(exc)), int(now_ms))
            for record, exc in parsed.malformed
        )
        if parsed.missing_id:
            metrics.MISSING_FIELDS.labels(dest.name, "id").inc(parsed.missing_id)
        if parsed.missing_time:
            metrics.MISSING_FIELDS.labels(dest.name, "event_time").inc(parsed.missing_time)
        self._lag_in.observe_ages(now_ms, map(_event_time_of, parsed.events))
        self._pending.extend(parsed.events)
        if self._highwater is not None and records:
            highwater = self._highwater(tp)
            unread = 0 if highwater is None else highwater - records[-1].offset - 1
            self._unread[tp] = max(0, unread)

    def next_work(self, *, poll_open: bool) -> Work | None:
        """Dead letters for unreadable records first, then the next batch: a full one while the
        poll is still being taken in (requests are not cut small under load), else what there is."""
        if self._malformed:
            chunk = self._malformed[:_MALFORMED_PER_WORK]
            del self._malformed[:_MALFORMED_PER_WORK]
            offsets: dict[TopicPartition, list[int]] = {}
            for letter in chunk:
                record = letter.record
                tp = TopicPartition(record.topic, record.partition)
                offsets.setdefault(tp, []).append(record.offset)
            return Work(self._dead_letter(chunk), offsets)
        pending = self._pending
        diversion = pending.next_diversion()
        if diversion is not None:
            return Work(self._divert(diversion), offsets_of(diversion.events))
        if not self._breaker.closed:
            return self._destination_probe()
        if not pending or (poll_open and not pending.fills_a_batch()):
            return None
        # rate limits: every tenant route with events owes tokens; they wait queued, not in a slot
        if isinstance(pending, TenantPending) and not pending.sendable():
            return None
        batch = pending.next_batch(crowded=self._backlog())
        if batch is None:  # every tenant's events still wait for their batch to fill
            return None
        route = None if batch.target is None else self._breakers.existing(batch.target.name)
        if route is not None and not route.closed:
            return Work(self._through_open_route(batch, route), batch.offsets())
        self._rate_limits.cut(batch)  # rate limits: its route is held back until it takes tokens
        return Work(self._deliver(batch), batch.offsets())

    def _destination_probe(self) -> Work | None:
        """The probe of the destination's breaker once its backoff has elapsed: one event (the
        first waiting; none yet: wait for one) or an empty batch; else nothing."""
        breaker = self._breaker
        if not breaker.probe_due():
            return None
        batch: Batch | None = None
        if self._dest.breaker_probe == "empty":
            batch = Batch([])
        elif self._pending:
            batch = self._pending.next_batch(max_records=1, linger=False)
        if batch is None:
            return None
        breaker.begin_probe()
        return Work(self._probe(batch), batch.offsets())

    async def _probe(self, batch: Batch) -> Awaitable[None] | None:
        self._in_flight.inc()
        self._in_flight_requests += 1
        try:
            return await self._deliverer.probe(batch, self._breaker)
        finally:
            self._in_flight.dec()
            self._in_flight_requests -= 1

    async def _through_open_route(self, batch: Batch, breaker: Breaker) -> None:
        """A batch of a route whose breaker is not closed: its first event probes when the
        backoff has elapsed, and the rest follow it if that closed the breaker; otherwise the
        events go to the retrier without a request (a partition cannot pause for one tenant)."""
        if breaker.probe_due():
            breaker.begin_probe()
            empty = self._dest.breaker_probe == "empty"
            probe, rest = (Batch([], batch.target), batch) if empty else batch.split(1)
            acknowledged = await self._deliverer.probe(probe, breaker)
            if acknowledged is not None:
                await acknowledged
            if not rest.events:
                return
            batch = rest
            if breaker.closed:
                await self._deliverer.deliver(batch)
                return
        await self._deliverer.bypass(batch, breaker)

    def room(self) -> int:
        """Records the next poll may bring: none while the buffer holds its limit, nor while the
        destination's breaker is open (until its probe is due) or half-open."""
        pending = self._pending
        self._breakers.settle()
        breaker = self._breaker
        full = self._holds(1.0) or not (breaker.closed or breaker.probe_due())
        full = full or (self._decoding is not None and self._decoding.waiting())
        if full != self._paused:
            self._paused = full
            metrics.PAUSED.labels(self._dest.name).set(int(full))
        return 0 if full else self._limit_records - len(pending)

    def _backlog(self) -> bool:
        """Whether the connector is behind: from the moment its buffer holds `BEHIND_SHARE` of
        its limit, or more than a window of requests (`max_in_flight` full batches) waits in
        Kafka past the records taken in, until the buffer falls below `CAUGHT_UP_SHARE` and
        less than that share of a window waits. A connector that keeps up holds what arrives
        within its linger and one round of its tenants, far below the limit whatever its load,
        and reads each partition up to its end; one that is behind keeps the buffer near full,
        or, when its intake is what holds it back, leaves records in Kafka. A half-full buffer
        is read either way by where it came from."""
        unread = sum(self._unread.values())
        if self._holds(BEHIND_SHARE) or unread >= self._window_records:
            self._behind = True
        elif (
            self._behind
            and not self._holds(CAUGHT_UP_SHARE)
            and unread < CAUGHT_UP_SHARE * self._window_records
        ):
            self._behind = False
        return self._behind

    def _holds(self, share: float) -> bool:
        """Whether the buffer holds at least `share` of its limit of records or of bytes."""
        pending = self._pending
        return (
            len(pending) >= share * self._limit_records
            or pending.size_bytes >= share * self._limit_bytes
        )

    @property
    def busy(self) -> bool:
        """Events in hand, or a destination breaker that is not closed (records wait in Kafka)."""
        waiting = self._decoding is not None and self._decoding.waiting()  # for the registry
        return bool(self._pending) or bool(self._malformed) or not self._breaker.closed or waiting

    def drop(self, partitions: set[TopicPartition]) -> None:
        self._pending.drop(partitions)
        self._malformed = [
            letter
            for letter in self._malformed
            if TopicPartition(letter.record.topic, letter.record.partition) not in partitions
        ]
        for tp in partitions:
            self._lag_records.pop(tp, None)
            self._unread.pop(tp, None)
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(self._dest.name, tp.topic, str(tp.partition))

    def after_commit(self, lag_records: Mapping[TopicPartition, int]) -> None:
        self._lag_records = dict(lag_records)
        for tp, lag in lag_records.items():
            metrics.CONSUMER_LAG.labels(self._dest.name, tp.topic, tp.partition).set(lag)
        self._progress.tick()

    def snapshot(self) -> status_page.Snapshot:
        """What `/status` shows of the work in hand."""
        return status_page.Snapshot(
            paused=self._paused,
            pending_events=len(self._pending),
            in_flight_requests=self._in_flight_requests,
            lag_records=dict(self._lag_records),
            last_delivered_ms=self._deliverer.last_delivered_ms,
            recent_failures=list(self._deliverer.recent_failures),
            breakers=self._breakers.describe(),
            rate_limits=self._rate_limits.describe(),
            concurrency=self._deliverer.limiter.view(),
        )

    async def _deliver(self, batch: Batch) -> Awaitable[None] | None:
        """A request's unit of work. For a full batch it returns the acknowledgement of its
        audit facts, which the worker awaits after the unit gave up its slot: with a backlog
        the next request starts at once. A partial batch waits for it in its slot: the events
        arriving meanwhile make the next batches larger, which matters most to a tenant
        destination behind, whose batches are cut per tenant. A tenant destination that keeps
        up and lingers (`max_linger_s`) has its batches fill while they linger: its requests
        give up their slot as full ones do."""
        self._in_flight.inc()
        self._in_flight_requests += 1
        try:
            acknowledged = await self._deliverer.resolve(batch)
            if acknowledged is None or batch.full or (self._lingers and not self._behind):
                return acknowledged
            await acknowledged
            return None
        finally:
            self._rate_limits.release(batch)  # rate limits: cut, and ended before taking tokens
            self._in_flight.dec()
            self._in_flight_requests -= 1

    async def _divert(self, diversion: Diversion) -> None:
        """Events that leave the HTTP path before any request (tenant lookups)."""
        await self._diverter.divert(diversion)
        events = Batch(diversion.events)
        metrics.RECORDS.labels(self._dest.name, diversion.outcome).inc(len(events))
        if diversion.outcome is not Outcome.FILTERED:
            self._deliverer.note_failure(
                diversion.outcome, events, None, diversion.error, diversion.reason
            )
        # an unknown tenant is news; a disabled tenant or a filter is a rule doing its work
        say = log.warning if diversion.reason is Reason.UNKNOWN_TENANT else log.debug
        say(
            "diverted",
            outcome=diversion.outcome,
            reason=diversion.reason,
            events=len(events),
            error=diversion.error,
        )

    async def _dead_letter(self, chunk: list[Unreadable]) -> None:
        await self._diverter.records_to_dlq(chunk)
        metrics.RECORDS.labels(self._dest.name, Outcome.DEAD_LETTERED).inc(len(chunk))
        log.warning(
            "malformed_dead_lettered",
            dest=self._dest.name,
            records=len(chunk),
            reason=chunk[0].reason,
            error=chunk[0].error,
        )
