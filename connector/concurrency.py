"""Adaptive request concurrency: a destination's in-flight limit, AIMD on round-trip time.

The model is Vector's adaptive request concurrency (`src/sinks/util/adaptive_concurrency/
controller.rs`). Each HTTP attempt is reported once answered (`answered`): a 2xx or other
reply the destination processed gives an RTT sample; 429, 503, a `Retry-After` and a timeout
are back-pressure. Time is cut into windows of one averaged RTT. At the end of each window:

- the window's mean RTT is compared with the past: an exponentially weighted mean and variance
  (`EWMA_ALPHA`) of earlier windows' means;
- the limit grows by one when the window reached it (as many attempts in flight as allowed), saw
  no back-pressure, and its RTT was at or under the past mean (evidence that more would help);
- else, on back-pressure, it shrinks in proportion to how much of it there was lately, unlike
  Vector (a tenth for any): the share of each window's answers that were back-pressure is
  averaged over windows (`BACK_PRESSURE_GAIN`), and the limit is multiplied by one less half that
  average, as DCTCP does with congestion marks (RFC 8257). A destination that answers a small
  steady share of requests 503 or 429 whatever its load, as web services do, cost a tenth of the
  limit in each window that met one, so the limit stayed a fraction of its ceiling and a tenant
  destination's round of requests stretched to seconds (the soak, docs/reliability.md).
  Overload that persists drives the average, and the decrease, toward a half per window;
- else it shrinks to `limit * DECREASE_RATIO` when the window's RTT was more than
  `RTT_DEVIATION_SCALE` standard deviations above the past mean and, unlike Vector, more than
  `RTT_MIN_RISE` (a tenth) above it: against a destination whose RTT is steady the deviation
  collapses to a millisecond, and the connector's own event-loop hiccups read as queueing (at
  N = 64 in `bench.capacity`: 19 decreases in 20 s and a limit of 45 without the floor, 3 and 64
  with it; a queueing destination's RTT rises far more);
- so the limit changes at most once per window.

A request between two attempts (a pause after a 429, a 503 or a timeout: `pausing`) keeps its
place in flight, so the limit is reached when the attempts in flight and the requests pausing
fill it. Counted as attempts alone, a steady share of 503s and 429s with a `Retry-After` held
places asleep, the limiter never saw its limit reached, and it stayed far below its ceiling
while every place was taken (docs/reliability.md, the soak).

The limit starts at 1 and never exceeds `max_in_flight` (the ceiling). With
`concurrency = "fixed"` the limit is `max_in_flight` from the start and never moves; RTTs are
still measured for the metrics and `/status`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from config.destination import Destination
from connector import metrics
from connector.http1.decoding import Answer

__all__ = [
    "BACK_PRESSURE_GAIN",
    "DECREASE_RATIO",
    "EWMA_ALPHA",
    "RTT_DEVIATION_SCALE",
    "Limiter",
    "is_back_pressure",
]

EWMA_ALPHA = 0.4
DECREASE_RATIO = 0.9  # on a slow window
BACK_PRESSURE_GAIN = 1 / 8  # each window's weight in the averaged share of back-pressure
RTT_DEVIATION_SCALE = 2.5
RTT_MIN_RISE = 0.1  # and at least a tenth above the mean (hifi; see the module docstring)
_BACK_PRESSURE_STATUSES = frozenset({429, 503})
# the sum of equal RTTs over their count can land a rounding error above their mean: compare
# window and past means with this slack (Vector rounds to a microsecond in its tests instead)
_RTT_EPSILON_S = 1e-9


def is_back_pressure(answer: Answer | None, error: BaseException | None) -> bool:
    """Whether an attempt's outcome asks the sender to slow down: 429, 503, a `Retry-After`
    on any reply, or a timeout (no reply in time). Connection failures are not: they say
    nothing of load (the destination is down, or not there)."""
    if answer is not None:
        status = answer.status
        return status in _BACK_PRESSURE_STATUSES or answer.header(b"retry-after") is not None
    if error is None:
        return False
    cause = error.__cause__ if error.__cause__ is not None else error
    timeouts = (TimeoutError, httpx.TimeoutException)
    return isinstance(error, timeouts) or isinstance(cause, timeouts)


@dataclass(slots=True)
class _Ewma:
    """An exponentially weighted mean and variance (Vector's `EwmaVar`)."""

    alpha: float
    mean: float | None = None
    variance: float = 0.0

    def update(self, point: float) -> None:
        if self.mean is None:
            self.mean = point
            return
        difference = point - self.mean
        increment = self.alpha * difference
        self.mean += increment
        self.variance = (1.0 - self.alpha) * (self.variance + difference * increment)


class Limiter:
    """How many requests a destination may have in flight now (`limit()`), adapted per RTT window.

    One per destination, shared by its tenant routes (they reach one service). Each HTTP attempt
    calls `sent()` before and `answered()` after; the worker reads `limit()` when it starts work.
    `clock` is seconds on a monotonic clock (tests pass their own).
    """

    def __init__(
        self,
        dest_name: str,
        *,
        ceiling: int,
        adaptive: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ceiling < 1:
            raise ValueError(f"destination {dest_name!r}: concurrency ceiling {ceiling} is below 1")
        self.dest_name = dest_name
        self.ceiling = ceiling
        self.adaptive = adaptive
        self._clock = clock
        self._limit = 1 if adaptive else ceiling
        self._limit_exact = float(self._limit)  # before flooring: small decreases add up
        self._in_flight = 0
        self._pausing = 0  # requests between two attempts, in their places
        self._past = _Ewma(EWMA_ALPHA)
        self._window_sum_s = 0.0  # this window's RTT samples
        self._window_samples = 0
        self._window_ends_s = clock()
        self._window_answers = 0
        self._window_back_pressure = 0
        self._back_pressure_share = 0.0  # averaged over windows (`BACK_PRESSURE_GAIN`)
        self._reached_limit = False
        self.last_rtt_s: float | None = None
        self._pausing_gauge = metrics.PAUSING.labels(dest_name)
        self._limit_gauge = metrics.CONCURRENCY_LIMIT.labels(dest_name)
        self._rtt_gauge = metrics.RTT.labels(dest_name)
        self._rtt_mean_gauge = metrics.RTT_MEAN.labels(dest_name)
        self._limit_gauge.set(self._limit)

    @classmethod
    def for_destination(cls, dest: Destination) -> Limiter:
        """The destination's limiter: adaptive up to `max_in_flight`, or fixed at it."""
        return cls(dest.name, ceiling=dest.max_in_flight, adaptive=dest.concurrency == "adaptive")

    def limit(self) -> int:
        """Requests that may be in flight now."""
        return self._limit

    @property
    def rtt_mean_s(self) -> float | None:
        """The averaged RTT of past windows (None before the first answer)."""
        return self._past.mean

    def sent(self) -> None:
        """An attempt is about to be sent."""
        self._in_flight += 1
        if self._in_flight + self._pausing >= self._limit:
            self._reached_limit = True

    @contextlib.contextmanager
    def pausing(self) -> Iterator[None]:
        """A request waits between two attempts, in its place: it counts toward the limit's
        being reached (the module's docstring)."""
        self._pausing += 1
        self._pausing_gauge.inc()
        if self._in_flight + self._pausing >= self._limit:
            self._reached_limit = True
        try:
            yield
        finally:
            self._pausing -= 1
            self._pausing_gauge.dec()

    def answered(self, rtt_s: float, *, processed: bool, back_pressure: bool) -> None:
        """An attempt ended after `rtt_s`: `processed` when the destination answered it (an RTT
        sample), `back_pressure` when it asked to slow down (429, 503, Retry-After, timeout)."""
        self._in_flight = max(0, self._in_flight - 1)
        self._window_answers += 1
        if back_pressure:
            self._window_back_pressure += 1
        if processed and not back_pressure:
            self.last_rtt_s = rtt_s
            self._rtt_gauge.set(rtt_s)
            self._window_sum_s += rtt_s
            self._window_samples += 1
        now_s = self._clock()
        window_rtt_s = self._window_sum_s / self._window_samples if self._window_samples else None
        past = self._past
        if past.mean is None:  # the first sample sets the past and the first window
            if window_rtt_s is not None:
                past.update(window_rtt_s)
                self._window_ends_s = now_s + window_rtt_s
                self._rtt_mean_gauge.set(window_rtt_s)
            return
        if now_s < self._window_ends_s:
            return
        self._adjust(past, window_rtt_s)
        if window_rtt_s is not None:
            past.update(window_rtt_s)
            self._rtt_mean_gauge.set(past.mean)
        self._window_ends_s = now_s + past.mean
        self._new_window()

    def view(self) -> dict[str, Any]:
        """For `/status`: the mode, the limit and its ceiling, the RTTs."""
        mean_s = self._past.mean
        return {
            "mode": "adaptive" if self.adaptive else "fixed",
            "limit": self._limit,
            "ceiling": self.ceiling,
            "attempts_in_flight": self._in_flight,
            "requests_pausing": self._pausing,
            "rtt_mean_ms": None if mean_s is None else round(mean_s * 1000, 3),
            "rtt_last_ms": None if self.last_rtt_s is None else round(self.last_rtt_s * 1000, 3),
        }

    def _adjust(self, past: _Ewma, window_rtt_s: float | None) -> None:
        """At a window's end: +1 on evidence that more would help, down by half the averaged
        share of back-pressure on back-pressure, x0.9 on a slow window; nothing in fixed mode."""
        if not self.adaptive:
            return
        limit = self._limit
        mean_s = past.mean
        pressed = self._window_back_pressure / self._window_answers if self._window_answers else 0
        self._back_pressure_share += BACK_PRESSURE_GAIN * (pressed - self._back_pressure_share)
        if (
            limit < self.ceiling
            and self._reached_limit
            and not pressed
            and window_rtt_s is not None
            and mean_s is not None
            and window_rtt_s <= mean_s + _RTT_EPSILON_S
        ):
            self._set_limit(self._limit_exact + 1)
            return
        if pressed:
            self._set_limit(self._limit_exact * (1 - self._back_pressure_share / 2))
            return
        threshold_s = max(
            math.sqrt(past.variance) * RTT_DEVIATION_SCALE, RTT_MIN_RISE * (mean_s or 0.0)
        )
        slow = (
            window_rtt_s is not None
            and mean_s is not None
            and window_rtt_s > mean_s + threshold_s + _RTT_EPSILON_S
        )
        if slow:
            self._set_limit(self._limit_exact * DECREASE_RATIO)

    def _set_limit(self, exact: float) -> None:
        self._limit_exact = min(float(self.ceiling), max(1.0, exact))
        self._limit = int(self._limit_exact)
        self._limit_gauge.set(self._limit)

    def _new_window(self) -> None:
        self._window_sum_s = 0.0
        self._window_samples = 0
        self._window_answers = self._window_back_pressure = 0
        self._reached_limit = self._in_flight + self._pausing >= self._limit
