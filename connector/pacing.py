"""Pacing a backfill's re-offers: a token bucket of `rate_per_s` events a second, in bursts of at most one chunk."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

MAX_RATE_PER_S = 1_000_000.0  # the highest --rate accepted
MAX_CHUNK_EVENTS = 500  # re-offers written (and awaited) together at most
_CHUNKS_PER_S = 4  # with a rate: about this many writes a second, so a stop waits little


def chunk_events(rate_per_s: float | None) -> int:
    """Re-offers per write: 500 unpaced; with a rate, a quarter second's worth (1 to 500)."""
    if rate_per_s is None:
        return MAX_CHUNK_EVENTS
    return max(1, min(MAX_CHUNK_EVENTS, int(rate_per_s / _CHUNKS_PER_S)))


class Pacer:
    """A token bucket: `rate_per_s` tokens a second, holding at most `burst`; None: unpaced.

    `reserve(count)` takes `count` tokens now, going into debt if it must, and says how long to
    wait before using them, so the events written never run ahead of the rate by more than one
    burst.
    """

    def __init__(
        self,
        rate_per_s: float | None,
        *,
        burst: int,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate_per_s = rate_per_s
        self._burst = burst
        self._clock_s = clock_s
        self._tokens = float(burst)
        self._at_s = clock_s()

    def reserve(self, count: int) -> float:
        """Take `count` tokens; returns the seconds to wait before the events may be written."""
        if self._rate_per_s is None:
            return 0.0
        now_s = self._clock_s()
        refill = (now_s - self._at_s) * self._rate_per_s
        self._tokens = min(float(self._burst), self._tokens + refill) - count
        self._at_s = now_s
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate_per_s

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
