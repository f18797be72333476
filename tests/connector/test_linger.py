"""`connector.linger`: the tenant linger grows while the round of tenants comes late, shrinks back
to the catalog's when it does not, and stays within its bounds."""

from __future__ import annotations

import pytest

from connector.linger import EVERY_S, POLL_SLACK_S, LingerSchedule


class _Clock:
    now_s = 0.0


def _schedule(clock: _Clock, floor_s: float = 0.1, ceiling_s: float = 0.5) -> LingerSchedule:
    return LingerSchedule(floor_s, ceiling_s, now_s=lambda: clock.now_s)


def _second(clock: _Clock, schedule: LingerSchedule, *late_ms: float) -> float:
    """One second of cuts, each `late_ms` past the linger; the linger after it, in ms."""
    for each in late_ms:
        schedule.cut(each)
    clock.now_s += EVERY_S
    return schedule.linger_ms()


def test_a_round_that_comes_late_lengthens_the_linger_up_to_the_ceiling() -> None:
    clock = _Clock()
    schedule = _schedule(clock)
    late_ms = POLL_SLACK_S * 1000 + 150  # 150 ms late beyond a poll's wait
    first = _second(clock, schedule, late_ms, late_ms)
    assert first == pytest.approx(200)  # 100 ms grown by at most double a second
    assert schedule.overdue_s == pytest.approx(0.3)  # one cut counts a linger past the slack
    seen = [_second(clock, schedule, late_ms) for _ in range(4)]
    assert seen == sorted(seen)
    assert seen[-1] == pytest.approx(500)  # half of lag_sla_s at the defaults: never more


def test_lateness_within_a_polls_wait_is_not_the_rounds() -> None:
    clock = _Clock()
    schedule = _schedule(clock)
    assert _second(clock, schedule, POLL_SLACK_S * 1000, 50) == pytest.approx(100)


def test_cuts_on_time_shrink_it_back_to_the_floor() -> None:
    clock = _Clock()
    schedule = _schedule(clock)
    for _ in range(4):
        _second(clock, schedule, 2_000)
    longest = schedule.linger_ms()
    assert _second(clock, schedule, 0, 10) == pytest.approx(longest * 0.8)
    for _ in range(10):
        _second(clock, schedule)  # no lingering cut at all: shrinks too
    assert schedule.linger_ms() == pytest.approx(100)


def test_it_is_reconsidered_once_a_second_and_not_at_all_without_a_linger() -> None:
    clock = _Clock()
    schedule = _schedule(clock)
    schedule.cut(5_000)
    clock.now_s += EVERY_S / 2
    assert schedule.linger_ms() == pytest.approx(100)  # not a second yet
    still = _schedule(clock, floor_s=0.0)
    assert _second(clock, still, 5_000) == 0.0


def test_one_queue_held_for_long_does_not_decide_it_alone() -> None:
    """A queue a rate limit or an open breaker held for a minute, among cuts on time."""
    clock = _Clock()
    schedule = _schedule(clock)
    assert _second(clock, schedule, 60_000, *([20] * 20)) == pytest.approx(100)


def test_seconds_with_nothing_lingering_shrink_it_too() -> None:
    clock = _Clock()
    schedule = _schedule(clock)
    for _ in range(4):
        _second(clock, schedule, 2_000)
    assert schedule.linger_ms() == pytest.approx(500)
    clock.now_s += 10 * EVERY_S  # quiet: no queue, no reading
    assert schedule.linger_ms() == pytest.approx(100)
