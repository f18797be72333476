"""Token buckets: a backfill's re-offers paced in chunks and the connector's rate limits.

Below both `connector.backfill` and `connector.rate_limits`, which share the `Pacer`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Pacer:
    """A token bucket: `rate_per_s` tokens a second, holding at most `burst`; None: unpaced.

    `reserve(count)` takes `count` tokens now, going into debt if it must (a count above the
    burst still goes), and says how long to wait before using them, so what is sent never runs
    ahead of the rate by more than one burst. Reservations are served in the order they are made.
    """

    def __init__(
        self,
        rate_per_s: float | None,
        *,
        burst: float,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate_per_s = rate_per_s
        self._burst = float(burst)
        self._clock_s = clock_s
        self._tokens = float(burst)
        self._at_s = clock_s()

    @property
    def rate_per_s(self) -> float | None:
        return self._rate_per_s

    def _refill(self) -> float:
        """Add the tokens earned since the last look (at most up to the burst); the rate."""
        now_s = self._clock_s()
        rate_per_s = self._rate_per_s or 0.0
        self._tokens = min(self._burst, self._tokens + (now_s - self._at_s) * rate_per_s)
        self._at_s = now_s
        return rate_per_s

    def reserve(self, count: int) -> float:
        """Take `count` tokens; returns the seconds to wait before the events may be written."""
        if self._rate_per_s is None:
            return 0.0
        self._refill()
        self._tokens -= count
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate_per_s

    def owed_s(self) -> float:
        """Seconds until the tokens reserved so far are earned (0: a reservation now need not wait)."""
        rate_per_s = self._refill()
        return 0.0 if self._tokens >= 0 or not rate_per_s else -self._tokens / rate_per_s

    def resize(self, rate_per_s: float, *, burst: float) -> None:
        """A new rate and burst from now on; the tokens earned so far at the old rate are kept
        (at most the new burst), and so is any debt."""
        self._refill()
        self._rate_per_s = rate_per_s
        self._burst = float(burst)
        self._tokens = min(self._burst, self._tokens)

    def refund(self, count: int) -> None:
        """Give back tokens taken for events that were not written (a stop during the wait)."""
        self._tokens += count

    async def take(self, count: int, stop: asyncio.Event) -> bool:
        """Wait until `count` events may be written; False if `stop` was set first."""
        wait_s = self.reserve(count)
        if stop.is_set():
            self.refund(count)
            return False
        if wait_s <= 0:
            return True
        try:
            async with asyncio.timeout(wait_s):
                await stop.wait()
        except TimeoutError:
            return True
        self.refund(count)
        return False
