"""Delivery of one batch over HTTP: send, classify, retry locally, isolate rejected events, hand off the rest.

This is the HTTP boundary: statuses and transport exceptions become `hifi.errors` types here.
A request leaves by a `Sender` (`connector.sender`: the connector's transport, `connector.http1`,
driven directly), over a route prepared once per URL; the transport raises httpx's exception
classes: `httpx.ConnectError` when no request reached the destination.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from operator import attrgetter
from typing import Any

import httpx
import structlog

from config.destination import Destination
from connector import metrics
from connector.backoff import pause_s
from connector.bearer import Bearer
from connector.bisection import Bisection, DeadLetter
from connector.breaker import Breaker, Breakers
from connector.concurrency import Limiter, is_back_pressure
from connector.divert import Diverter
from connector.http1.addresses import ForbiddenAddress
from connector.http1.decoding import Answer
from connector.rate_limits import RateLimits
from connector.rebatch import Batch, Target, encode_values
from connector.reply_policy import (
    UNSENDABLE,
    Moved,
    Unreachable,
    classify,
    is_destination_fault,
    no_reply,
    parse_retry_after,
    status_class,
)
from connector.sender import Routes, Sender
from connector.webhooks import Prepared, RequestHeaders
from hifi.audit import AuditTrail, SentBatch
from hifi.errors import DestinationRejected, DestinationUnavailable
from hifi.redaction import short_error
from hifi.vocabulary import Outcome, Reason

__all__ = ["Deliverer", "classify", "parse_retry_after", "status_class"]

log = structlog.get_logger(__name__)

_GZIP_IN_THREAD_BYTES = 64 * 1024  # compress larger bodies off the event loop
RECENT_FAILURES = 20
_event_time_of = attrgetter("event_time_ms")


class Deliverer:
    """Resolves every event of a batch to delivered, handed to the retrier, or dead-lettered.

    With an audit trail, every outcome's fact is acknowledged before `deliver` returns (the
    diverter writes those of hand-offs and dead letters).
    """

    def __init__(
        self,
        sender: Sender,
        dest: Destination,
        diverter: Diverter,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        trail: AuditTrail | None = None,
        auth: Bearer | None = None,
        breakers: Breakers | None = None,
        limiter: Limiter | None = None,
    ) -> None:
        """`breakers`: where destination-level failures are counted (a `Breakers` of its own
        when not given); the caller decides whether a batch may be sent."""
        self._sender = sender
        self.limiter = limiter or Limiter.for_destination(dest)  # told of every attempt
        self._auth = auth  # the Authorization of a destination with [auth]
        self.breakers = breakers or Breakers(dest, trail=trail)
        self.rate_limits = RateLimits(dest)  # every attempt below takes its tokens first
        self._dest = dest
        self._diverter = diverter
        self._sleep = sleep
        self._trail = trail
        # what every request of a route shares, its headers merged once (`Routes`); the
        # transport ends an attempt by `request_timeout_s`, whatever the destination trickles
        self._routes = Routes(dest)
        self._request_headers = RequestHeaders(dest)  # each request's own: its id, a signature
        self._failing = False
        self._dest_name = dest.name
        #: the last failures, newest last, for /status (texts masked and shortened)
        self.recent_failures: deque[dict[str, Any]] = deque(maxlen=RECENT_FAILURES)
        self.last_delivered_ms: int | None = None
        self._meters = metrics.DeliveryMeters(dest.name)

    async def deliver(self, batch: Batch) -> None:
        """Return once every event has an outcome and its audit facts are acknowledged; raises
        only if Kafka cannot take a hand-off, a dead letter or an audit fact."""
        acknowledged = await self.resolve(batch)
        if acknowledged is not None:
            await acknowledged

    async def resolve(self, batch: Batch) -> Awaitable[None] | None:
        """`deliver`, except that it returns once the destination accepted the batch, with the
        broker's acknowledgement of the delivery's audit facts still to await (None: nothing
        is left). For a full batch the connector's unit gives its in-flight slot to the next
        request meanwhile: under load a fact's acknowledgement takes milliseconds.

        The batch is counted once by result (`hifi_connector_batches_total`), whatever its
        bisection cost; its facts name it (`SentBatch`)."""
        sent = SentBatch(os.urandom(8).hex())
        route = _route_of(batch)
        breaker = self.breakers.of(route)
        try:
            status = await self.send_with_retries(batch, breaker=breaker)
        except DestinationUnavailable as exc:  # a `Moved` too: the destination's fault
            if not isinstance(exc, Unreachable):  # counted at each attempt already
                breaker.failed(str(exc))
            self._meters.batches["handed_off"].inc()
            await self.hand_off(batch, exc, sent)
        except DestinationRejected as exc:
            self._meters.batches["rejected"].inc()
            if is_destination_fault(self._dest, exc):
                breaker.failed(str(exc))
                await self.dead_letter(batch, exc, sent, " (a destination fault: not bisected)")
            else:
                await self._bisect(batch, exc, sent)
        else:
            breaker.succeeded()
            self.breakers.forget_if_healthy(route)
            self._meters.batches["delivered"].inc()
            return await self.delivered(batch, status, sent)
        return None

    async def _bisect(self, batch: Batch, first: DestinationRejected, sent: SentBatch) -> None:
        """Carry out the `Bisection` of a rejected batch, so only the events rejected on their
        own reach the DLQ; each fact says how many bisection requests the batch had spent."""
        plan = Bisection(batch, first, budget=self._dest.max_bisect_requests)
        while (step := plan.next()) is not None:
            so_far = SentBatch(sent.batch, step.spent)
            if isinstance(step, DeadLetter):
                await self.dead_letter(step.batch, step.error, so_far, step.note)
                continue
            self._meters.bisection_requests.inc()
            try:
                status = await self.send_with_retries(step.batch)
            except DestinationUnavailable as transient:
                await self.hand_off(step.batch, transient, so_far)
            except DestinationRejected as again:
                plan.rejected(step.batch, again)
            else:
                acknowledged = await self.delivered(step.batch, status, so_far)
                if acknowledged is not None:
                    await acknowledged

    async def probe(self, batch: Batch, breaker: Breaker) -> Awaitable[None] | None:
        """A half-open breaker's probe: one attempt of a small batch (one event, or none with
        `breaker_probe = "empty"`). A reply that is not a destination-level failure closes the
        breaker, anything else opens it again; the probe's events get their outcome as any
        batch's would, without local retries or bisection. What `resolve` returns."""
        breaker.begin_probe()
        sent = SentBatch(os.urandom(8).hex())
        try:
            status = await self.send_with_retries(batch, attempts=1)
        except DestinationUnavailable as exc:
            breaker.probe_ended(ok=False, error=str(exc))
            if batch.events:
                self._meters.batches["handed_off"].inc()
                await self.hand_off(batch, exc, sent)
        except DestinationRejected as exc:
            fault = is_destination_fault(self._dest, exc)
            breaker.probe_ended(ok=not fault, error=str(exc))
            if batch.events:
                self._meters.batches["rejected"].inc()
                await self.dead_letter(batch, exc, sent)
        else:
            breaker.probe_ended(ok=True)
            if batch.events:
                self._meters.batches["delivered"].inc()
                return await self.delivered(batch, status, sent)
        return None

    async def bypass(self, batch: Batch, breaker: Breaker) -> None:
        """Hand a batch to the retrier without a request: its route's breaker is open."""
        where = f"tenant {breaker.name!r}" if breaker.name else "the destination"
        error = short_error(f"circuit breaker of {where} open: {breaker.last_error}")
        await self._diverter.to_retrier(batch.events, status=None, error=error)
        metrics.RECORDS.labels(self._dest_name, Outcome.HANDED_OFF).inc(len(batch))
        self.note_failure(Outcome.HANDED_OFF, batch, None, error)
        log.debug("breaker_bypassed", events=len(batch), **_target_of(batch))

    async def send_with_retries(
        self, batch: Batch, *, breaker: Breaker | None = None, attempts: int | None = None
    ) -> int:
        """One request, retried locally on transient failures with backoff and Retry-After;
        the 2xx status that accepted it. This one loop drives every post of the request: the
        first, each retry, and with `[auth]` the one after a 401 with a fresh token (the only
        4xx resent: the credential, not the request, was stale). `breaker`: counts each attempt
        that could not connect (none for bisection requests); `attempts`: instead of
        `local_retry_attempts`."""
        body, _ = encode_values(batch.values(), self._dest.format)
        if self._dest.compression == "gzip":
            body = await self._gzip(body)
        own = self._request_headers.of(batch)  # raises before any attempt: a bad_header
        limit = attempts or self._dest.local_retry_attempts
        post = functools.partial(self._post, batch.target, body, own, len(batch), breaker)
        failed = 0  # attempts that failed transiently
        token: str | None = None  # with [auth]: the token of the last post
        refused = False  # a 401 refused `token`: one post more with a fresh one, not a retry
        while True:
            await self.rate_limits.take(batch)
            try:
                if self._auth is None:
                    return await post()
                token = await (
                    self._auth.refresh(token) if refused and token else self._auth.token()
                )
                return await post(("Authorization", f"Bearer {token}"))
            except DestinationRejected as exc:
                if self._auth is None or exc.status != 401 or refused:
                    raise
                refused = True
            except DestinationUnavailable as exc:
                failed, refused = failed + 1, False
                if failed == limit or isinstance(exc, Moved):  # a redirect: it moved
                    raise
                self._note_retry(exc)
                with self.limiter.pausing():  # in its place, which the limiter counts as used
                    await self._sleep(pause_s(self._dest, exc, failed_attempts=failed))

    async def _post(
        self,
        target: Target | None,
        body: bytes,
        own: Prepared,
        events: int,
        breaker: Breaker | None,
        authorization: tuple[str, str] | None = None,
    ) -> int:
        """One request to `target`'s route (None: the destination's); `own`: the request's
        own headers; `authorization`: the bearer token's header, with `[auth]`."""
        extra = own.of_attempt(body, time.time())
        if authorization is not None:
            extra = [*extra, authorization]
        self._meters.events_per_request.observe(events)
        started = time.perf_counter()
        answer: Answer | None = None
        error: BaseException | None = None
        self.limiter.sent()
        try:
            # the transport bounds the attempt (`hifi.total_timeout_s`) and counts a 2xx status
            # line that came in time; this bounds whatever it does not, a little later
            async with asyncio.timeout(self._dest.request_timeout_s + _BACKSTOP_S):
                answer = await self._sender.post(self._routes.of(target), body, extra)
        except ForbiddenAddress as exc:
            self._meters.requests("connection").inc()
            raise DestinationRejected(
                short_error(str(exc)), status=None, reason=Reason.FORBIDDEN_DESTINATION
            ) from exc
        except (httpx.TransportError, *UNSENDABLE, TimeoutError) as exc:
            error = exc
            kind, unavailable = no_reply(exc, self._dest.request_timeout_s)
            self._meters.requests(kind).inc()
            if breaker is not None and isinstance(unavailable, Unreachable):
                breaker.failed(str(unavailable))
            raise unavailable from exc
        finally:
            rtt_s = time.perf_counter() - started
            self._meters.request_duration.observe(rtt_s)
            pressed = is_back_pressure(answer, error)
            self.limiter.answered(rtt_s, processed=answer is not None, back_pressure=pressed)
        self._meters.requests(status_class(answer.status)).inc()
        for kind in answer.anomalies:
            self._meters.anomaly(kind)
        classify(answer, self._meters.anomaly)
        return answer.status

    def _note_retry(self, exc: BaseException | None) -> None:
        """Count a local retry; the first of a failing spell is one warning."""
        metrics.LOCAL_RETRIES.labels(self._dest_name).inc()
        if not self._failing:
            self._failing = True
            log.warning("destination_failing", error=str(exc))

    async def _gzip(self, body: bytes) -> bytes:
        if len(body) < _GZIP_IN_THREAD_BYTES:
            return gzip.compress(body, compresslevel=5)
        return await asyncio.to_thread(gzip.compress, body, 5)

    async def delivered(self, batch: Batch, status: int, sent: SentBatch) -> Awaitable[None] | None:
        """Count a delivery; what is left to await of its audit facts (None: no trail)."""
        if self._failing:
            self._failing = False
            log.info("destination_recovered")
        now_ms = time.time() * 1000
        self.last_delivered_ms = int(now_ms)
        events = batch.events
        retried = [event for event in events if event.retried]
        if retried:
            events = [event for event in events if not event.retried]
            self._meters.lag_out_retried.observe_ages(now_ms, map(_event_time_of, retried))
        self._meters.lag_out_first.observe_ages(now_ms, map(_event_time_of, events))
        self._meters.delivered_records.inc(len(batch))
        self._meters.sent_events[Outcome.DELIVERED].inc(len(batch))
        if self._trail is None:
            return None
        return await self._trail.write(Outcome.DELIVERED, batch.events, status=status, sent=sent)

    async def hand_off(self, batch: Batch, exc: DestinationUnavailable, sent: SentBatch) -> None:
        cause = Moved.cause if isinstance(exc, Moved) else None
        await self._diverter.to_retrier(
            batch.events, status=exc.status, error=str(exc), cause=cause, sent=sent
        )
        metrics.RECORDS.labels(self._dest_name, Outcome.HANDED_OFF).inc(len(batch))
        self._meters.sent_events[Outcome.HANDED_OFF].inc(len(batch))
        self.note_failure(Outcome.HANDED_OFF, batch, exc.status, str(exc))
        log.warning(
            "handed_off",
            events=len(batch),
            status=exc.status,
            error=str(exc),
            attempts=self._dest.local_retry_attempts,
            **_target_of(batch),
        )

    async def dead_letter(
        self, batch: Batch, exc: DestinationRejected, sent: SentBatch, note: str = ""
    ) -> None:
        error = short_error(f"{exc}{note}")
        await self._diverter.to_dlq(
            batch.events, reason=exc.reason, status=exc.status, error=error, sent=sent
        )
        metrics.RECORDS.labels(self._dest_name, Outcome.DEAD_LETTERED).inc(len(batch))
        self._meters.sent_events[Outcome.DEAD_LETTERED].inc(len(batch))
        self.note_failure(Outcome.DEAD_LETTERED, batch, exc.status, error, exc.reason)
        log.warning(
            "dead_lettered",
            events=len(batch),
            reason=exc.reason,
            status=exc.status,
            error=error,
            first_origin=batch.events[0].origin,
            **_target_of(batch),
        )

    def note_failure(
        self,
        outcome: Outcome,
        batch: Batch,
        status: int | None,
        error: str,
        reason: Reason | None = None,
    ) -> None:
        """Keep the failure for `/status` (its text masked and shortened)."""
        entry: dict[str, Any] = {
            "at_ms": int(time.time() * 1000),
            "outcome": outcome,
            "events": len(batch),
            "status": status,
            "error": short_error(error),
            **_target_of(batch),
        }
        if reason is not None:
            entry["reason"] = reason
        self.recent_failures.append(entry)


_BACKSTOP_S = 0.5


def _route_of(batch: Batch) -> str | None:
    """The tenant route whose breaker a batch reports to; None: the destination's."""
    return None if batch.target is None else batch.target.name


def _target_of(batch: Batch) -> dict[str, str]:
    """What logs and `/status` say of a batch's target: its tenant, when it has one."""
    return {} if batch.target is None else {"tenant": batch.target.name}
