"""The circuit breaker: a destination's (or a tenant route's) failures stop its requests until a probe succeeds.

A destination-level failure says nothing about the events (`docs/destinations.md`): a status
of `destination_fault_statuses`, a connection that could not be made (refused, TLS, DNS), or a
batch whose 5xx, 429 or timeouts outlasted its local retries. After `breaker_failures` of them
in a row the breaker opens; a 2xx in between starts the count again. Bisection requests and
event-level 4xx are not counted (the caller does not report them).

    CLOSED --failures--> OPEN --backoff elapsed, `begin_probe`--> HALF_OPEN
    HALF_OPEN --probe 2xx--> CLOSED      HALF_OPEN --probe failed--> OPEN (backoff doubled)

The backoff starts at 1 s and doubles at each failed probe up to `breaker_max_open_s`; closing
resets it. Outcomes of requests that began before the breaker opened do not move it: only the
probe's does. Each change is one log line and, with an audit trail, one breaker fact
(`hifi/audit/facts.py`), which the auditor shows in the destination's health and the retrier's
dashboard from there; the state, the opens and the time spent not closed are metrics
(`hifi_connector_breaker_*`).
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable

import structlog

from config.destination import Destination
from connector import metrics
from hifi.audit import BREAKER, FACTS_WRITTEN, AuditTrail
from hifi.redaction import short_error

log = structlog.get_logger(__name__)

FIRST_OPEN_S = 1.0


class BreakerState(enum.IntEnum):
    """A breaker's state; its value is the `hifi_connector_breaker_state` gauge's."""

    CLOSED = 0  #: requests go out
    HALF_OPEN = 1  #: one probe is out; nothing else is sent
    OPEN = 2  #: nothing is sent until the backoff has elapsed

    def __str__(self) -> str:
        return self.name.lower()


class Breaker:
    """The breaker of one destination or one tenant route; the event loop's thread only."""

    def __init__(
        self,
        *,
        failures: int,
        max_open_s: float,
        name: str = "",
        on_change: Callable[[Breaker, BreakerState], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`name`: the tenant route's (empty for the destination's own); `on_change(breaker,
        before)` after every change; `clock`: monotonic seconds (tests pass a fake)."""
        self.name = name
        self._threshold = failures
        self._max_open_s = max_open_s
        self._on_change = on_change
        self._clock = clock
        self.state = BreakerState.CLOSED
        self.failures = 0  # consecutive destination-level failures while closed
        self.open_s = FIRST_OPEN_S  # the current backoff
        self.reopen_at_s = 0.0  # clock time at which an open breaker may probe
        self.opens = 0
        self.last_error = ""
        self._not_closed_since_s = 0.0  # for `settle_open_s`
        self.since_ms = 0  # wall time it left closed (or closed again); 0 before any change
        self.open_s_total = 0.0

    @property
    def closed(self) -> bool:
        return self.state is BreakerState.CLOSED

    def failed(self, error: str) -> None:
        """A destination-level failure of a request sent while closed."""
        if self.state is not BreakerState.CLOSED:
            return
        self.failures += 1
        self.last_error = error
        if self.failures >= self._threshold:
            self._open()

    def succeeded(self) -> None:
        """A 2xx of a request sent while closed: the count starts again."""
        if self.state is BreakerState.CLOSED:
            self.failures = 0

    def probe_due(self) -> bool:
        """Open, and its backoff has elapsed: the next request may be the probe."""
        return self.state is BreakerState.OPEN and self._clock() >= self.reopen_at_s

    def wait_s(self) -> float:
        """Seconds until an open breaker may probe (0 when it may, or is not open)."""
        if self.state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self.reopen_at_s - self._clock())

    def begin_probe(self) -> None:
        """The probe is being sent: OPEN -> HALF_OPEN."""
        if self.state is BreakerState.OPEN:
            self._change(BreakerState.HALF_OPEN)

    def probe_ended(self, *, ok: bool, error: str = "") -> None:
        """The probe's outcome: a 2xx closes the breaker, anything else opens it again for
        twice as long (at most `breaker_max_open_s`)."""
        if self.state is not BreakerState.HALF_OPEN:
            return
        if ok:
            self.failures = 0
            self.open_s = FIRST_OPEN_S
            self._change(BreakerState.CLOSED)
            return
        self.last_error = error or self.last_error
        self.open_s = min(self.open_s * 2, self._max_open_s)
        self.reopen_at_s = self._clock() + self.open_s
        self._change(BreakerState.OPEN)

    def settle_open_s(self) -> float:
        """Seconds spent not closed since the last call (or the last change)."""
        if self.state is BreakerState.CLOSED:
            return 0.0
        now_s = self._clock()
        spent = max(0.0, now_s - self._not_closed_since_s)
        self._not_closed_since_s = now_s
        self.open_s_total += spent
        return spent

    def _open(self) -> None:
        self.opens += 1
        self.open_s = min(FIRST_OPEN_S, self._max_open_s)
        self.reopen_at_s = self._clock() + self.open_s
        self._not_closed_since_s = self._clock()
        self._change(BreakerState.OPEN)

    def _change(self, state: BreakerState) -> None:
        before = self.state
        if before is not BreakerState.CLOSED:
            self.settle_open_s()  # the time up to now, in the state it is leaving
        if BreakerState.CLOSED in (before, state):
            self.since_ms = int(time.time() * 1000)
        self.state = state
        if self._on_change is not None:
            self._on_change(self, before)

    def describe(self) -> dict[str, object]:
        """What `/status` shows of it."""
        return {
            "state": str(self.state),
            "consecutive_failures": self.failures,
            "opens": self.opens,
            "probe_in_s": round(self.wait_s(), 1) if self.state is BreakerState.OPEN else None,
            "backoff_s": self.open_s,
            "last_error": self.last_error or None,
        }


class Breakers:
    """A destination's breaker, and with tenant lookups one per tenant route, each opening alone.

    A route's breaker exists while it has failures to remember (a closed one with none is
    forgotten), so a long tail of healthy tenants costs nothing. Metrics: the destination's
    state; opens and seconds not closed of all its breakers; the number of open routes.
    """

    def __init__(
        self,
        dest: Destination,
        *,
        clock: Callable[[], float] = time.monotonic,
        trail: AuditTrail | None = None,
    ) -> None:
        """`trail`: where each change is written as a breaker fact (none without)."""
        self._dest = dest
        self._clock = clock
        self._trail = trail
        self._writing: set[asyncio.Task[None]] = set()  # breaker facts not yet acknowledged
        if trail is not None:  # hifi_audit_facts_total{outcome="breaker"} from the first scrape
            FACTS_WRITTEN.labels(dest.name, BREAKER)
        self.destination = self._new("")
        self._routes: dict[str, Breaker] = {}
        self._state = metrics.BREAKER_STATE.labels(dest.name)
        self._opens = metrics.BREAKER_OPENS.labels(dest.name)
        self._open_seconds = metrics.BREAKER_OPEN_SECONDS.labels(dest.name)
        self._open_routes = metrics.BREAKER_OPEN_ROUTES.labels(dest.name)

    def _new(self, name: str) -> Breaker:
        return Breaker(
            failures=self._dest.breaker_failures,
            max_open_s=self._dest.breaker_max_open_s,
            name=name,
            on_change=self._changed,
            clock=self._clock,
        )

    def of(self, route: str | None) -> Breaker:
        """The breaker of a tenant route (created on first use), or the destination's (None)."""
        if route is None:
            return self.destination
        breaker = self._routes.get(route)
        if breaker is None:
            breaker = self._routes[route] = self._new(route)
        return breaker

    def existing(self, route: str) -> Breaker | None:
        """A tenant route's breaker if it has one (it has failures to remember)."""
        return self._routes.get(route)

    def forget_if_healthy(self, route: str | None) -> None:
        """Drop a route's breaker once it is closed with no failure to remember."""
        if route is None:
            return
        breaker = self._routes.get(route)
        if breaker is not None and breaker.closed and breaker.failures == 0:
            del self._routes[route]

    def open_routes(self) -> int:
        return sum(1 for breaker in self._routes.values() if not breaker.closed)

    def settle(self) -> None:
        """Add the time spent not closed to `hifi_connector_breaker_open_seconds_total`."""
        spent = self.destination.settle_open_s()
        spent += sum(breaker.settle_open_s() for breaker in self._routes.values())
        if spent:
            self._open_seconds.inc(spent)

    def _changed(self, breaker: Breaker, before: BreakerState) -> None:
        state = breaker.state
        if state is BreakerState.OPEN and before is BreakerState.CLOSED:
            self._opens.inc()
        self.settle()
        if not breaker.name:
            self._state.set(int(state))
        else:
            self._open_routes.set(self.open_routes())
        say = log.warning if state is BreakerState.OPEN else log.info
        say(
            "breaker_" + str(state),
            before=str(before),
            **({"tenant": breaker.name} if breaker.name else {}),
            failures=breaker.failures,
            probe_in_s=breaker.open_s if state is BreakerState.OPEN else None,
            error=None if state is BreakerState.CLOSED else breaker.last_error or None,
        )
        self._write_fact(breaker)

    def _write_fact(self, breaker: Breaker) -> None:
        """Write the change as a breaker fact in a task kept until acknowledged (in the order
        of the changes: the producer keeps the order of its calls within a partition)."""
        if self._trail is None:
            return
        fact = self._trail.breaker_fact(
            route=breaker.name or None,
            state=str(breaker.state),
            since_ms=breaker.since_ms,
            last_error=None if breaker.closed else breaker.last_error,
        )
        task = asyncio.get_running_loop().create_task(self._trail.record_breaker(fact))
        self._writing.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writing.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:  # the events' own facts fail their delivery; this one is only news
            log.warning("breaker_fact_failed", error=short_error(f"{type(exc).__name__}: {exc}"))

    async def flush(self) -> None:
        """Wait for the breaker facts written so far (the connector's stop, before its producer
        closes)."""
        while self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)

    def describe(self) -> dict[str, object]:
        """`/status`: the destination's breaker and those of routes that are not closed."""
        routes = {
            name: breaker.describe()
            for name, breaker in sorted(self._routes.items())
            if not breaker.closed
        }
        return {
            "destination": self.destination.describe(),
            "open_routes": len(routes),
            "routes": routes,
        }
