"""The adaptive concurrency limiter on synthetic round-trip times, on a clock of the test's own."""

from __future__ import annotations

import itertools

import httpx
import pytest

from connector.concurrency import DECREASE_RATIO, Limiter, is_back_pressure
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
def test_backs_off_by_the_decrease_ratio_on_back_pressure(status: int) -> None:
    """A window with a 429 or 503 ends with the limit times 0.9 (floored), once."""
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
    assert limiter.limit() == int(before * DECREASE_RATIO)


def test_one_decrease_per_window() -> None:
    """Many back-pressure answers inside one window cost one decrease, not one each."""
    limiter, clock = _limiter(ceiling=64)
    for _ in range(30):
        _window(limiter, clock, 0.005)
    clock.now_s += 0.01  # the window ends: the next answer adjusts
    limiter.sent()
    limiter.answered(0.01, processed=True, back_pressure=True)
    after_first = limiter.limit()
    assert after_first == 27
    for _ in range(20):  # the same instant: inside the new window
        limiter.sent()
        limiter.answered(0.01, processed=True, back_pressure=True)
    assert limiter.limit() == after_first
    clock.now_s += 0.01
    limiter.sent()
    limiter.answered(0.01, processed=True, back_pressure=True)
    assert limiter.limit() == int(after_first * DECREASE_RATIO)


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
