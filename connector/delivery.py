"""Delivery of one batch over HTTP: send, classify, retry locally, isolate rejected events, hand off the rest.

This is the HTTP boundary: statuses and client exceptions become `hifi.errors` types here. The
client is httpx with aiohttp's transport (`http_client`), whose exceptions arrive as
the `__cause__` of httpx ones.
"""

from __future__ import annotations

import asyncio
import gzip
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from email.utils import parsedate_to_datetime
from operator import attrgetter
from typing import Any

import aiohttp
import httpx
import structlog
from httpx_aiohttp import AiohttpTransport
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from config.destination import Destination
from connector import metrics
from connector.bearer import Bearer
from connector.concurrency import Limiter, is_back_pressure
from connector.divert import Diverter
from connector.rebatch import Batch, encode_values
from hifi.audit import AuditTrail, SentBatch
from hifi.errors import DestinationRejected, DestinationUnavailable
from hifi.redaction import excerpt, short_error
from hifi.vocabulary import Outcome, Reason

log = structlog.get_logger(__name__)

_GZIP_IN_THREAD_BYTES = 64 * 1024  # compress larger bodies off the event loop
_BACKOFF_BASE_S = 0.1
_ERROR_BODY_CHARS = 120
RECENT_FAILURES = 20
_event_time_of = attrgetter("event_time_ms")
_RESULTS = metrics.BATCH_RESULTS
_SENT_OUTCOMES = (Outcome.DELIVERED, Outcome.HANDED_OFF, Outcome.DEAD_LETTERED)


def parse_retry_after(value: str | None, *, now_s: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_s is None else now_s
    return max(0.0, when.timestamp() - now)


def classify(response: httpx.Response) -> None:
    """Return for 2xx; raise `DestinationUnavailable` (retry) or `DestinationRejected` (never retry)."""
    status = response.status_code
    if 200 <= status < 300:
        return
    detail = short_error(
        f"HTTP {status} {response.reason_phrase}: {excerpt(response.text, _ERROR_BODY_CHARS)}"
    )
    if status == 429 or status >= 500 or status < 200:
        retry_after = (
            parse_retry_after(response.headers.get("retry-after")) if status in (429, 503) else None
        )
        raise DestinationUnavailable(detail, status=status, retry_after_s=retry_after)
    if 300 <= status < 400:
        where = response.headers.get("location", "?")
        raise DestinationRejected(
            short_error(
                f"HTTP {status} redirect to {where}; set follow_redirects = true if intended"
            ),
            status=status,
            reason=Reason.REDIRECT,
        )
    raise DestinationRejected(detail, status=status, reason=Reason.HTTP_4XX)


def status_class(status: int) -> str:
    return f"{status // 100}xx"


def http_client(
    dest: Destination, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """The destination's HTTP client: pooled, at most `max_in_flight` connections.

    TLS: the context of the destination's `tls_*` keys (its CA, its client certificate) when set,
    else httpx's default trust store; certificates and host names are verified either way.
    """
    limits = httpx.Limits(
        max_connections=dest.max_in_flight, max_keepalive_connections=dest.max_in_flight
    )
    verify = dest.ssl_context() or True
    return httpx.AsyncClient(
        timeout=httpx.Timeout(dest.request_timeout_s),
        limits=limits,
        verify=verify,
        follow_redirects=dest.follow_redirects,
        # httpx's API over aiohttp's connection pool: httpcore's pool re-polls every idle socket
        # and takes anyio locks on each request (encode/httpx#3215): more CPU per request
        # (docs/performance.md).
        transport=transport or AiohttpTransport(verify=verify, limits=limits),
        headers={"User-Agent": "hifi-connector"},
    )


class Deliverer:
    """Resolves every event of a batch to delivered, handed to the retrier, or dead-lettered.

    With an audit trail, every outcome's fact is acknowledged before `deliver` returns (the
    diverter writes those of hand-offs and dead letters).
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        dest: Destination,
        diverter: Diverter,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        trail: AuditTrail | None = None,
        auth: Bearer | None = None,
        limiter: Limiter | None = None,
    ) -> None:
        self._client = client
        self.limiter = limiter or Limiter.for_destination(dest)  # told of every attempt
        self._auth = auth  # the Authorization of a destination with [auth]
        self._dest = dest
        self._diverter = diverter
        self._sleep = sleep
        self._trail = trail
        self._headers = dest.header_values()
        self._jitter = wait_random_exponential(
            multiplier=_BACKOFF_BASE_S, max=dest.local_retry_max_backoff_s
        )
        self._failing = False
        self._dest_name = dest.name
        #: the last failures, newest last, for /status (texts masked and shortened)
        self.recent_failures: deque[dict[str, Any]] = deque(maxlen=RECENT_FAILURES)
        self.last_delivered_ms: int | None = None
        self._lag_out_first = metrics.LAG_OUT.labels(dest.name, "first")
        self._lag_out_retried = metrics.LAG_OUT.labels(dest.name, "retried")
        self._batches = {result: metrics.BATCHES.labels(dest.name, result) for result in _RESULTS}
        self._sent_events = {
            outcome: metrics.SENT_EVENTS.labels(dest.name, outcome) for outcome in _SENT_OUTCOMES
        }
        self._bisection_requests = metrics.BISECTION_REQUESTS.labels(dest.name)

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
        sent = SentBatch(uuid.uuid4().hex[:16])
        try:
            status = await self.send_with_retries(batch)
        except DestinationUnavailable as exc:
            self._batches["handed_off"].inc()
            await self._hand_off(batch, exc, sent)
        except DestinationRejected as exc:
            self._batches["rejected"].inc()
            await self._isolate(batch, exc, sent)
        else:
            self._batches["delivered"].inc()
            return await self._delivered(batch, status, sent)
        return None

    async def send_with_retries(self, batch: Batch) -> int:
        """One request, retried locally on transient failures with backoff and Retry-After;
        the 2xx status that accepted it."""
        body, content_type = encode_values(batch.values(), self._dest.format)
        target = batch.target
        headers = {
            **(self._headers if target is None else target.headers),
            "Content-Type": content_type,
            "Idempotency-Key": batch.idempotency_key(),
        }
        url = self._dest.url if target is None else target.url
        if self._dest.compression == "gzip":
            body = await self._gzip(body)
            headers["Content-Encoding"] = "gzip"
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._dest.local_retry_attempts),
            wait=self._wait_s,
            retry=retry_if_exception_type(DestinationUnavailable),
            sleep=self._sleep,
            before_sleep=self._count_retry,
            reraise=True,
        )
        status = 0
        async for attempt in retrying:
            with attempt:
                status = await self._send_once(url, body, headers, len(batch))
        return status

    async def _send_once(self, url: str, body: bytes, headers: dict[str, str], events: int) -> int:
        """One attempt; with `[auth]` a 401 refreshes the token and sends this request once more
        (the only 4xx resent: the credential, not the request, was stale)."""
        if self._auth is None:
            return await self._post(url, body, headers, events)
        token = await self._auth.token()
        try:
            return await self._post(
                url, body, {**headers, "Authorization": f"Bearer {token}"}, events
            )
        except DestinationRejected as exc:
            if exc.status != 401:
                raise
        token = await self._auth.refresh(token)
        return await self._post(url, body, {**headers, "Authorization": f"Bearer {token}"}, events)

    async def _post(self, url: str, body: bytes, headers: dict[str, str], events: int) -> int:
        metrics.EVENTS_PER_REQUEST.labels(self._dest_name).observe(events)
        started = time.perf_counter()
        response: httpx.Response | None = None
        error: BaseException | None = None
        self.limiter.sent()
        try:
            # httpx bounds each phase (connect, write, read); this bounds the attempt as a whole,
            # so a destination that trickles its reply cannot hold an in-flight slot for ever.
            async with asyncio.timeout(self._dest.request_timeout_s):
                response = await self._client.post(url, content=body, headers=headers)
        except httpx.TooManyRedirects as exc:
            metrics.REQUESTS.labels(self._dest_name, "3xx").inc()
            raise DestinationRejected(
                f"too many redirects ({exc})", status=None, reason=Reason.REDIRECT
            ) from exc
        except (httpx.TransportError, TimeoutError) as exc:
            error = exc
            raise self._unavailable(exc) from exc
        finally:
            rtt_s = time.perf_counter() - started
            metrics.REQUEST_DURATION.labels(self._dest_name).observe(rtt_s)
            pressed = is_back_pressure(response, error)
            self.limiter.answered(rtt_s, processed=response is not None, back_pressure=pressed)
        metrics.REQUESTS.labels(self._dest_name, status_class(response.status_code)).inc()
        classify(response)
        return response.status_code

    def _unavailable(self, exc: httpx.TransportError | TimeoutError) -> DestinationUnavailable:
        """A request that got no reply: counted as a timeout or a connection failure."""
        cause = exc.__cause__ if isinstance(exc.__cause__, aiohttp.ClientError) else exc
        name = type(cause).__name__
        if isinstance(cause, TimeoutError | httpx.TimeoutException):
            metrics.REQUESTS.labels(self._dest_name, "timeout").inc()
            return DestinationUnavailable(f"timeout after {self._dest.request_timeout_s}s ({name})")
        metrics.REQUESTS.labels(self._dest_name, "connection").inc()
        return DestinationUnavailable(short_error(f"connection error: {name}: {cause}"))

    def _wait_s(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, DestinationUnavailable) and exc.retry_after_s is not None:
            return min(exc.retry_after_s, self._dest.retry_after_max_s)
        return float(self._jitter(state))

    def _count_retry(self, state: RetryCallState) -> None:
        metrics.LOCAL_RETRIES.labels(self._dest_name).inc()
        if not self._failing:
            self._failing = True
            exc = state.outcome.exception() if state.outcome else None
            log.warning("destination_failing", error=str(exc))

    async def _gzip(self, body: bytes) -> bytes:
        if len(body) < _GZIP_IN_THREAD_BYTES:
            return gzip.compress(body, compresslevel=5)
        return await asyncio.to_thread(gzip.compress, body, 5)

    async def _delivered(
        self, batch: Batch, status: int, sent: SentBatch
    ) -> Awaitable[None] | None:
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
            self._lag_out_retried.observe_ages(now_ms, map(_event_time_of, retried))
        self._lag_out_first.observe_ages(now_ms, map(_event_time_of, events))
        metrics.RECORDS.labels(self._dest_name, Outcome.DELIVERED).inc(len(batch))
        self._sent_events[Outcome.DELIVERED].inc(len(batch))
        if self._trail is None:
            return None
        return await self._trail.write(Outcome.DELIVERED, batch.events, status=status, sent=sent)

    async def _hand_off(self, batch: Batch, exc: DestinationUnavailable, sent: SentBatch) -> None:
        await self._diverter.to_retrier(batch.events, status=exc.status, error=str(exc), sent=sent)
        metrics.RECORDS.labels(self._dest_name, Outcome.HANDED_OFF).inc(len(batch))
        self._sent_events[Outcome.HANDED_OFF].inc(len(batch))
        self.note_failure(Outcome.HANDED_OFF, batch, exc.status, str(exc))
        log.warning(
            "handed_off",
            events=len(batch),
            status=exc.status,
            error=str(exc),
            attempts=self._dest.local_retry_attempts,
            **_target_of(batch),
        )

    async def _dead_letter(
        self, batch: Batch, exc: DestinationRejected, sent: SentBatch, note: str = ""
    ) -> None:
        error = short_error(f"{exc}{note}")
        await self._diverter.to_dlq(
            batch.events, reason=exc.reason, status=exc.status, error=error, sent=sent
        )
        metrics.RECORDS.labels(self._dest_name, Outcome.DEAD_LETTERED).inc(len(batch))
        self._sent_events[Outcome.DEAD_LETTERED].inc(len(batch))
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

    async def _isolate(self, batch: Batch, first: DestinationRejected, sent: SentBatch) -> None:
        """Bisect a rejected batch so only the events rejected on their own reach the DLQ; each
        half sent is a bisection request (`hifi_connector_bisection_requests_total`), and each
        fact says how many the batch had spent by then."""
        if first.reason is Reason.REDIRECT:
            await self._dead_letter(batch, first, sent)
            return
        budget = self._dest.max_bisect_requests
        rejected: deque[tuple[Batch, DestinationRejected]] = deque([(batch, first)])
        while rejected:
            part, exc = rejected.popleft()
            so_far = SentBatch(sent.batch, self._dest.max_bisect_requests - budget)
            if len(part) == 1:
                await self._dead_letter(part, exc, so_far)
                continue
            if budget < 2:
                note = f" (in a rejected group of {len(part)}; bisection budget spent)"
                await self._dead_letter(part, exc, so_far, note)
                continue
            for half in part.halves():
                budget -= 1
                self._bisection_requests.inc()
                so_far = SentBatch(sent.batch, self._dest.max_bisect_requests - budget)
                try:
                    status = await self.send_with_retries(half)
                except DestinationUnavailable as transient:
                    await self._hand_off(half, transient, so_far)
                except DestinationRejected as again:
                    rejected.append((half, again))
                else:
                    acknowledged = await self._delivered(half, status, so_far)
                    if acknowledged is not None:
                        await acknowledged


def _target_of(batch: Batch) -> dict[str, str]:
    """What logs and `/status` say of a batch's target: its tenant, when it has one."""
    return {} if batch.target is None else {"tenant": batch.target.name}
