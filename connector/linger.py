"""A tenant destination's linger, adapted to the connector's spare CPU.

With `[lookups]`, a tenant's events wait up to the linger for its batch to fill (`max_linger_s`,
`connector.tenant_pending`). Each tenant with events sends about one request per linger, so a
connector serving N tenants at a linger of L seconds makes about N / L requests a second, each
costing the same CPU whatever it carries. When that is more than one core can do, the round of
tenants stretches instead: every tenant waits for the others' requests, and the lag grows with
the number of tenants, not with the load (docs/performance.md, "The tenant round").

The schedule reads the process's CPU time once a second. Busier than `TARGET_BUSY` of a core,
the linger grows in proportion (at most doubling a second), so the connector sends fewer,
larger requests; with CPU to spare it shrinks back (at most halving a second) to the catalog's
`max_linger_s`, which stays the floor. It never passes half of `lag_sla_s`: the linger is
the part of the lag this schedule adds. With `max_linger_s = 0` nothing lingers, and nothing
adapts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["EVERY_S", "TARGET_BUSY", "LingerSchedule"]

#: the share of one core the connector aims to keep under (the rest absorbs bursts)
TARGET_BUSY = 0.6
#: how often the CPU share is read again
EVERY_S = 1.0
_MAX_STEP = 2.0  # the linger at most doubles, or halves, at each reading


class LingerSchedule:
    """The linger, in seconds, between `floor_s` (the catalog's) and `ceiling_s`."""

    def __init__(
        self,
        floor_s: float,
        ceiling_s: float,
        *,
        target_busy: float = TARGET_BUSY,
        cpu_s: Callable[[], float] = time.process_time,
        now_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.floor_s = floor_s
        self.ceiling_s = max(floor_s, ceiling_s)
        self.linger_s = floor_s
        self.busy = 0.0  # the share of a core used over the last reading
        self._target = target_busy
        self._cpu_s, self._now_s = cpu_s, now_s
        self._last = (now_s(), cpu_s())

    def linger_ms(self) -> float:
        """The linger now, in milliseconds; read again from the CPU once `EVERY_S` has passed
        (cheap otherwise: called for each batch the connector considers)."""
        now_s = self._now_s()
        then_s, cpu_then_s = self._last
        if now_s - then_s >= EVERY_S and self.floor_s > 0:
            cpu_s = self._cpu_s()
            self.busy = (cpu_s - cpu_then_s) / (now_s - then_s)
            step = min(_MAX_STEP, max(1 / _MAX_STEP, self.busy / self._target))
            self.linger_s = min(self.ceiling_s, max(self.floor_s, self.linger_s * step))
            self._last = (now_s, cpu_s)
        return self.linger_s * 1000
