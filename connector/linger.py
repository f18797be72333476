"""A tenant destination's linger, adapted to the request rate the connector sustains.

With `[lookups]`, a tenant's events wait up to the linger for its batch to fill (`max_linger_s`,
`connector.tenant_pending`). Each tenant with events sends about one request per linger, so a
connector serving N tenants at a linger of L seconds is asked for about N / L requests a
second, each costing the same CPU whatever it carries. When that is more than it can send (a
slow or shared core, a CPU limit, slots held by a slow destination), the round of tenants
stretches instead: a queue due at L is cut later, and every tenant waits for the others'
requests, so the lag grows with the number of tenants, not with the load
(docs/performance.md, "Tenant lookups").

The schedule measures that directly, as the connector runs: each cut of a queue that lingered
reports how long past the linger it came. A due queue may wait up to one poll for the next
batch to be considered (`POLL_SLACK_S`, the worker's poll timeout) when nothing else wakes the
connector: lateness beyond that is the round's. Once a second, when the cuts came late beyond
that slack by more than a quarter of the linger on average, the linger grows to about the round
the connector managed (at most doubling a second): fewer, larger requests. When they came
within the slack, it shrinks back (by a fifth a second) to the catalog's `max_linger_s`, which
stays the floor.
It never passes half of `lag_sla_s`: the linger is part of the lag. With `max_linger_s = 0`
nothing lingers, and nothing adapts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["EVERY_S", "POLL_SLACK_S", "LingerSchedule"]

#: how often the linger is reconsidered
EVERY_S = 1.0
#: how late a due queue may be cut only for want of a poll (hifi.worker's poll timeout)
POLL_SLACK_S = 0.2
_LATE = 0.25  # cuts late beyond the slack by more than this share of the linger: grow it
_MAX_GROWTH = 2.0
_SHRINK = 0.8


class LingerSchedule:
    """The linger, in seconds, between `floor_s` (the catalog's) and `ceiling_s`."""

    def __init__(
        self, floor_s: float, ceiling_s: float, *, now_s: Callable[[], float] = time.monotonic
    ) -> None:
        self.floor_s = floor_s
        self.ceiling_s = max(floor_s, ceiling_s)
        self.linger_s = floor_s
        self.overdue_s = 0.0  # how late the lingering cuts came, on average, over the last second
        self._now_s = now_s
        self._next_s = now_s() + EVERY_S
        self._late_ms = 0.0  # summed over the cuts since the last reconsideration
        self._cuts = 0

    def linger_ms(self) -> float:
        """The linger now, in milliseconds; reconsidered once `EVERY_S` has passed (cheap
        otherwise: read for each batch the connector considers)."""
        if self._now_s() >= self._next_s:
            self._reconsider()
        return self.linger_s * 1000

    def cut(self, overdue_ms: float) -> None:
        """A queue that lingered was cut `overdue_ms` past the linger. One cut counts for at
        most a linger beyond the poll's slack: a queue a rate limit or an open breaker held
        for long, or a clock's step, does not decide the average alone."""
        most_ms = self.linger_s * 1000 + POLL_SLACK_S * 1000
        self._late_ms += min(most_ms, max(0.0, overdue_ms))
        self._cuts += 1

    def _reconsider(self) -> None:
        now_s = self._now_s()
        idle_steps = int((now_s - self._next_s) / EVERY_S)  # seconds with no reading at all
        self._next_s = now_s + EVERY_S
        late_s = self._late_ms / self._cuts / 1000 if self._cuts else 0.0
        self._late_ms, self._cuts, self.overdue_s = 0.0, 0, late_s
        linger_s = self.linger_s * _SHRINK**idle_steps  # unread while nothing lingered
        if linger_s <= 0:
            return
        excess_s = late_s - POLL_SLACK_S
        if excess_s > _LATE * linger_s:
            linger_s *= min(_MAX_GROWTH, 1 + excess_s / linger_s)
        elif excess_s <= 0:
            linger_s *= _SHRINK
        self.linger_s = min(self.ceiling_s, max(self.floor_s, linger_s))
