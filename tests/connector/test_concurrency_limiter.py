"""The adaptive concurrency limiter on synthetic round-trip times, on a clock of the test's own."""

from __future__ import annotations

import contextlib
import itertools
import random
import statistics

import httpx
import pytest

from connector.concurrency import BACK_PRESSURE_GAIN, DECREASE_RATIO, Limiter, is_back_pressure
from connector.http1.decoding import Answer


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _limiter(ceiling: int, *, adaptive: bool = True) -> tuple[Limiter, Clock]:
    clock = Clock()
    return Limiter("unit", ceiling=ceiling, adaptive=adaptive, clock=clock), clock


def _window(
    limiter: Limiter,
    clock: Clock,
    rtt_s: float,
    *,
    back_pressure: bool = False,
    full: bool = True,
    step_s: float | None = None,
) -> None:
    """One RTT window: as many attempts as the limit allows (or one fewer), all answered after
    `rtt_s`; the clock moves `step_s` (a little past `rtt_s`), so the first answer ends the window."""
    sent = limiter.limit() if full else max(0, limiter.limit() - 1)
    for _ in range(max(1, sent)):
        limiter.sent()
    clock.now_s += rtt_s * 1.01 if step_s is None else step_s
    for _ in range(max(1, sent)):
        limiter.answered(rtt_s, processed=not back_pressure, back_pressure=back_pressure)


def test_grows_to_the_ceiling_on_a_fast_constant_rtt() -> None:
    """At the limit with a constant RTT, the limit grows by one per window up to the ceiling."""
    limiter, clock = _limiter(ceiling=16)
    assert limiter.limit() == 1
    seen = [limiter.limit()]
    for _ in range(40):
        _window(limiter, clock, 0.005)
        seen.append(limiter.limit())
    assert limiter.limit() == 16
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(seen))
    assert limiter.rtt_mean_s == pytest.approx(0.005)


def test_does_not_grow_without_reaching_the_limit() -> None:
    """Windows that never had as many attempts in flight as allowed give no evidence: no growth."""
    limiter, clock = _limiter(ceiling=16)
    for _ in range(10):
        _window(limiter, clock, 0.005)
    reached = limiter.limit()
    for _ in range(10):
        _window(limiter, clock, 0.005, full=False)
    assert limiter.limit() == reached


@pytest.mark.parametrize("status", [429, 503])
def test_one_back_pressure_answer_among_many_costs_little(status: int) -> None:
    """A window whose answers were the last window's 29 and one 429 or 503 (a share of 1/30):
    the averaged share is BACK_PRESSURE_GAIN / 30, and the limit shrinks by half of that, once
    (to 29.9..., floored); Vector's rule took a tenth (27)."""
    limiter, clock = _limiter(ceiling=64)
    for _ in range(30):
        _window(limiter, clock, 0.005)
    before = limiter.limit()
    assert before == 30
    response = httpx.Response(status)
    limiter.sent()
    clock.now_s += 0.01
    limiter.answered(
        0.01, processed=True, back_pressure=is_back_pressure(Answer.of_response(response), None)
    )
    assert limiter.limit() == int(before * (1 - BACK_PRESSURE_GAIN / 30 / 2)) == 29


def test_one_decrease_per_window_and_more_as_the_pressure_lasts() -> None:
    """Many back-pressure answers inside one window cost one decrease, not one each; windows of
    nothing but back-pressure cost more each time (the averaged share rises toward 1)."""
    limiter, clock = _limiter(ceiling=64)
    for _ in range(30):
        _window(limiter, clock, 0.005)
    for _ in range(20):  # one window: the last window's answers, then 20 of back-pressure
        limiter.sent()
    clock.now_s += 0.01
    for _ in range(20):
        limiter.answered(0.01, processed=True, back_pressure=True)
    after_first = limiter.limit()
    assert after_first == 29
    limits = [after_first]
    for _ in range(8):  # windows of back-pressure alone
        clock.now_s += 0.01
        for _ in range(5):
            limiter.sent()
            limiter.answered(0.01, processed=True, back_pressure=True)
        limits.append(limiter.limit())
    drops = [a - b for a, b in itertools.pairwise(limits)]
    assert all(drop >= 1 for drop in drops)
    assert drops[-1] > drops[0]
    assert limits[-1] <= 12  # faster than a tenth a window (29 x 0.9^8 = 12.5)


def _windows_with_sporadic_back_pressure(
    limiter: Limiter, clock: Clock, share: float, windows: int
) -> list[int]:
    """Full windows at a steady RTT where each answer is a 503 with probability `share`."""
    draw = random.Random(7)
    limits = []
    for _ in range(windows):
        sent = limiter.limit()
        for _ in range(sent):
            limiter.sent()
        clock.now_s += 0.005 * 1.01
        for _ in range(sent):
            pressed = draw.random() < share
            limiter.answered(0.005, processed=not pressed, back_pressure=pressed)
        limits.append(limiter.limit())
    return limits


def test_a_steady_share_of_503s_whatever_the_load_does_not_pin_the_limit_low() -> None:
    """A destination that answers 1.5 % of requests 503 at any load (as web services do): the
    limit stays near its ceiling. With a tenth off for any window that met one (Vector's rule)
    it held near 20 of 64, and a tenant destination's round stretched to seconds."""
    limiter, clock = _limiter(ceiling=64)
    limits = _windows_with_sporadic_back_pressure(limiter, clock, 0.015, 600)
    assert statistics.mean(limits[300:]) > 48


def test_requests_pausing_in_their_places_count_toward_the_limit() -> None:
    """A quarter of the places held by requests pausing between two attempts (a 429's
    Retry-After, a 503's backoff), the rest full of attempts at a steady RTT: the limit grows
    to the ceiling, and `/status` shows them. Counted as attempts alone, the limit was never
    reached and stayed where it was (a tenant destination's at 7-17 of 64, the soak)."""
    limiter, clock = _limiter(ceiling=64)
    for _ in range(8):
        _window(limiter, clock, 0.005)
    assert limiter.limit() == 8
    for _ in range(200):
        limit = limiter.limit()
        asleep = max(1, limit // 4)
        with contextlib.ExitStack() as pauses:
            for _ in range(asleep):
                pauses.enter_context(limiter.pausing())
            for _ in range(limit - asleep):
                limiter.sent()
            assert limiter.view()["requests_pausing"] == asleep
            clock.now_s += 0.005 * 1.01
            for _ in range(limit - asleep):
                limiter.answered(0.005, processed=True, back_pressure=False)
    assert limiter.limit() == 64
    assert limiter.view()["requests_pausing"] == 0


def test_overload_that_persists_brings_the_limit_down() -> None:
    """Half of all answers back-pressure, window after window: the limit falls to a few."""
    limiter, clock = _limiter(ceiling=64)
    for _ in range(70):
        _window(limiter, clock, 0.005)
    assert limiter.limit() == 64
    limits = _windows_with_sporadic_back_pressure(limiter, clock, 0.5, 60)
    assert limits[-1] <= 4


def test_backs_off_when_the_rtt_jumps_beyond_its_deviation() -> None:
    """A window whose RTT is far above the past mean (the destination queues) shrinks the limit
    once, without any back-pressure status."""
    limiter, clock = _limiter(ceiling=64)
    for _ in range(30):
        _window(limiter, clock, 0.005)
    before = limiter.limit()
    assert before == 30
    _window(limiter, clock, 0.050)  # ten times slower
    assert limiter.limit() == int(before * DECREASE_RATIO)


def test_timeouts_are_back_pressure_connection_failures_are_not() -> None:
    """A timeout (even as an httpx error's cause) and a Retry-After ask to slow down; a refused
    connection and a 2xx or a 400 do not."""
    assert is_back_pressure(None, TimeoutError())
    wrapped = httpx.ReadError("x")
    wrapped.__cause__ = TimeoutError()
    assert is_back_pressure(None, wrapped)
    assert is_back_pressure(None, httpx.ReadTimeout("slow"))
    assert is_back_pressure(
        Answer.of_response(httpx.Response(500, headers={"Retry-After": "3"})), None
    )
    assert not is_back_pressure(None, httpx.ConnectError("refused"))
    assert not is_back_pressure(Answer.of_response(httpx.Response(200)), None)
    assert not is_back_pressure(Answer.of_response(httpx.Response(400)), None)
    assert not is_back_pressure(None, None)  # cancelled: no answer, no signal


def test_floor_of_one() -> None:
    """Back-pressure in every window takes the limit down to 1 and never below."""
    limiter, clock = _limiter(ceiling=64)
    for _ in range(20):
        _window(limiter, clock, 0.005)
    for _ in range(60):
        _window(limiter, clock, 0.005, back_pressure=True)
    assert limiter.limit() == 1


def test_fixed_mode_keeps_max_in_flight_and_measures_rtt() -> None:
    """`concurrency = "fixed"`: the limit is the ceiling whatever happens; RTTs are still kept."""
    limiter, clock = _limiter(ceiling=8, adaptive=False)
    assert limiter.limit() == 8
    for _ in range(5):
        _window(limiter, clock, 0.005, back_pressure=True)
    _window(limiter, clock, 0.5)
    assert limiter.limit() == 8
    view = limiter.view()
    assert view["mode"] == "fixed"
    assert view["limit"] == 8
    assert view["rtt_last_ms"] == pytest.approx(500.0)


def test_status_view_and_gauges() -> None:
    """`/status` shows the limit, its ceiling and the mean RTT; the gauges follow the limit."""
    from connector import metrics

    limiter, clock = _limiter(ceiling=4)
    for _ in range(10):
        _window(limiter, clock, 0.002)
    view = limiter.view()
    assert view["mode"] == "adaptive"
    assert (view["limit"], view["ceiling"]) == (4, 4)
    assert view["rtt_mean_ms"] == pytest.approx(2.0)
    assert metrics.CONCURRENCY_LIMIT.labels("unit")._value.get() == 4
    assert metrics.RTT_MEAN.labels("unit")._value.get() == pytest.approx(0.002)


def test_bad_ceiling_is_refused() -> None:
    """A ceiling below one is a clear error naming the destination."""
    with pytest.raises(ValueError, match="destination 'unit'"):
        Limiter("unit", ceiling=0)


def test_a_rise_under_a_tenth_is_not_queueing() -> None:
    """On a steady RTT (its deviation near 0) windows 5 % slower are noise, not queueing: no
    decrease; windows 25 % slower are, once per window."""
    limiter, clock = _limiter(ceiling=64)
    for _ in range(30):
        _window(limiter, clock, 0.100)
    before = limiter.limit()
    for _ in range(2):
        _window(limiter, clock, 0.105, full=False)
    assert limiter.limit() == before
    for _ in range(2):  # the first window still holds the answers of the 0.105 ones
        _window(limiter, clock, 0.125, full=False)
    assert limiter.limit() == int(before * DECREASE_RATIO)
