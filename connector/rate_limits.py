"""Rate limits of a destination and of its tenant routes: token buckets of events and of requests a second.

A destination's `rate_limit_events_per_s` and `rate_limit_requests_per_s`, and the same fields of
a tenant's entry, are token buckets (`connector.pacing.Pacer`) holding one second's worth. Every
attempt of a request takes a request token and a token per event before it is sent: local
retries, bisection halves and breaker probes too, since the limit is what the destination sees
(the one resend after a 401 with a fresh OAuth2 token does not: it replaces a refused request).
A batch larger than a second's worth still goes: it takes the tokens as a debt, and what follows
waits for it.

The wait happens inside the request's unit of work, before the POST, so the request holds its
in-flight slot meanwhile: when every slot waits, the worker polls nothing more (intake pauses,
the events stay in Kafka) and nothing is dropped. A tenant route's buckets are taken first and
the destination's last, just before the request. The handler cuts no batch for a route that
owes tokens or has a batch cut and not yet counted (`holds_back`), so a limited tenant holds at
most about one slot while the other tenants' batches keep going.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any

from config.destination import Destination
from connector import metrics
from connector.pacing import Pacer
from connector.rebatch import Batch
from tenants.route import Route

_ROUTES_SHOWN = 50  # /status lists at most this many routes that owe tokens


class _Buckets:
    """The events bucket and the requests bucket of one destination or tenant route."""

    __slots__ = ("events", "requests")

    def __init__(
        self,
        events_per_s: float | None,
        requests_per_s: float | None,
        clock_s: Callable[[], float],
    ) -> None:
        self.events = _bucket(events_per_s, clock_s)
        self.requests = _bucket(requests_per_s, clock_s)

    @property
    def limited(self) -> bool:
        return self.events is not None or self.requests is not None

    def rates(self) -> tuple[float | None, float | None]:
        return _rate(self.events), _rate(self.requests)

    def reserve(self, events: int) -> float:
        """Take one request's tokens; the seconds to wait before it may be sent."""
        wait_s = 0.0
        if self.events is not None:
            wait_s = self.events.reserve(events)
        if self.requests is not None:
            wait_s = max(wait_s, self.requests.reserve(1))
        return wait_s

    def refund(self, events: int) -> None:
        if self.events is not None:
            self.events.refund(events)
        if self.requests is not None:
            self.requests.refund(1)

    def owed_s(self) -> float:
        """Seconds until the tokens taken so far are earned: what a request now would wait at least."""
        return max((b.owed_s() for b in (self.events, self.requests) if b is not None), default=0.0)

    def describe(self) -> dict[str, Any]:
        events_per_s, requests_per_s = self.rates()
        return {
            "events_per_s": events_per_s,
            "requests_per_s": requests_per_s,
            "owed_s": round(self.owed_s(), 3),
        }


def _bucket(rate_per_s: float | None, clock_s: Callable[[], float]) -> Pacer | None:
    """A bucket holding one second's worth; None without a limit."""
    return None if rate_per_s is None else Pacer(rate_per_s, burst=rate_per_s, clock_s=clock_s)


def _rate(bucket: Pacer | None) -> float | None:
    return None if bucket is None else bucket.rate_per_s


def _limits_of(route: Route) -> tuple[float | None, float | None]:
    return route.rate_limit_events_per_s, route.rate_limit_requests_per_s


class RateLimits:
    """The rate limits of one destination: its own buckets and a pair per limited tenant route,
    created when the route is first used and re-sized when its entry changes its limits."""

    def __init__(
        self,
        dest: Destination,
        *,
        clock_s: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock_s = clock_s
        self._sleep = sleep
        events_per_s, requests_per_s = dest.rate_limit_events_per_s, dest.rate_limit_requests_per_s
        self._own = _Buckets(events_per_s, requests_per_s, clock_s)
        self._routes: dict[str, _Buckets] = {}  # by tenant: limited routes only
        self._cut: dict[int, str] = {}  # id of a batch cut and not yet counted: its tenant
        self._cut_per_route: collections.Counter[str] = collections.Counter()
        self._waiting = 0
        name = dest.name
        metrics.RATE_LIMIT.labels(name, "events").set(events_per_s or 0)
        metrics.RATE_LIMIT.labels(name, "requests").set(requests_per_s or 0)
        self._wait_seconds = metrics.RATE_LIMIT_WAIT_SECONDS.labels(name)
        self._limited = metrics.RATE_LIMITED_REQUESTS.labels(name)
        self._waiting_gauge = metrics.RATE_LIMIT_WAITING.labels(name)
        self._routes_gauge = metrics.RATE_LIMITED_ROUTES.labels(name)

    @property
    def waiting(self) -> int:
        """Requests waiting for their tokens now."""
        return self._waiting

    async def take(self, batch: Batch) -> None:
        """Wait until one attempt of `batch` may be sent: its tenant route's tokens first, then
        the destination's. A cancelled wait gives its tokens back."""
        target = batch.target
        if isinstance(target, Route):  # a tenant's route
            route = self._buckets_of(target)
            self.release(batch)
            if route is not None:
                await self._wait(route, len(batch))
        if self._own.limited:
            await self._wait(self._own, len(batch))

    async def _wait(self, buckets: _Buckets, events: int) -> None:
        wait_s = buckets.reserve(events)
        if wait_s <= 0:
            return
        self._waiting += 1
        self._waiting_gauge.inc()
        self._limited.inc()
        started_s = self._clock_s()
        try:
            await self._sleep(wait_s)
        except asyncio.CancelledError:
            buckets.refund(events)
            raise
        finally:
            self._waiting -= 1
            self._waiting_gauge.dec()
            self._wait_seconds.inc(max(0.0, self._clock_s() - started_s))

    def _buckets_of(self, route: Route) -> _Buckets | None:
        """The buckets of a tenant's route (None: its entry sets no limit), made or re-sized to
        the route's limits; a route whose entry no longer sets one forgets its buckets."""
        events_per_s, requests_per_s = _limits_of(route)
        tenant = route.tenant
        buckets = self._routes.get(tenant)
        if events_per_s is None and requests_per_s is None:
            if buckets is not None:
                del self._routes[tenant]
                self._routes_gauge.set(len(self._routes))
            return None
        if buckets is None:
            buckets = self._routes[tenant] = _Buckets(events_per_s, requests_per_s, self._clock_s)
            self._routes_gauge.set(len(self._routes))
        elif buckets.rates() != (events_per_s, requests_per_s):
            buckets.events = _resized(buckets.events, events_per_s, self._clock_s)
            buckets.requests = _resized(buckets.requests, requests_per_s, self._clock_s)
        return buckets

    def cut(self, batch: Batch) -> None:
        """A batch of a limited route was cut: its route is held back until the batch takes its
        tokens (`take`) or its unit ends (`release`)."""
        target = batch.target
        if not isinstance(target, Route) or _limits_of(target) == (None, None):
            return
        self._cut[id(batch)] = target.tenant
        self._cut_per_route[target.tenant] += 1

    def release(self, batch: Batch) -> None:
        """Forget that `batch` was cut (it took its tokens, or its unit ended without)."""
        tenant = self._cut.pop(id(batch), None)
        if tenant is None:
            return
        self._cut_per_route[tenant] -= 1
        if not self._cut_per_route[tenant]:
            del self._cut_per_route[tenant]

    def holds_back(self, route: Route) -> bool:
        """Whether no batch of `route` should be cut now: a batch of it was cut and has not taken
        its tokens yet, or its buckets owe tokens (its next request would wait in a slot)."""
        if _limits_of(route) == (None, None):
            return False
        if route.tenant in self._cut_per_route:
            return True
        buckets = self._buckets_of(route)
        return buckets is not None and buckets.owed_s() > 0

    def describe(self) -> dict[str, Any]:
        """`/status`: the destination's limits, what it owes now, the requests waiting, and the
        tenant routes that owe tokens (at most `_ROUTES_SHOWN`)."""
        owing: dict[str, Any] = {}
        for tenant, buckets in sorted(self._routes.items()):
            if len(owing) >= _ROUTES_SHOWN:
                break
            if buckets.owed_s() > 0:
                owing[tenant] = buckets.describe()
        return {
            **self._own.describe(),
            "waiting_requests": self._waiting,
            "limited_routes": len(self._routes),
            "owing_routes": owing,
        }


def _resized(
    bucket: Pacer | None, rate_per_s: float | None, clock_s: Callable[[], float]
) -> Pacer | None:
    """`bucket` at a new rate (its tokens and debt kept), made if new, dropped without a limit."""
    if rate_per_s is None:
        return None
    if bucket is None:
        return _bucket(rate_per_s, clock_s)
    if bucket.rate_per_s != rate_per_s:
        bucket.resize(rate_per_s, burst=rate_per_s)
    return bucket
