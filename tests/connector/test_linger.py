"""`connector.linger`: the tenant linger grows while the connector is short of CPU, shrinks back to
the catalog's when it is not, and stays within its bounds."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from connector.linger import EVERY_S, TARGET_BUSY, LingerSchedule


@dataclass
class _Clocks:
    """Wall and CPU time the test moves: `run(busy)` spends one reading at that share of a core."""

    now_s: float = 0.0
    cpu_s: float = 0.0

    def run(self, busy: float, seconds: float = EVERY_S) -> None:
        self.now_s += seconds
        self.cpu_s += busy * seconds


def _schedule(clocks: _Clocks, floor_s: float = 0.1, ceiling_s: float = 0.5) -> LingerSchedule:
    return LingerSchedule(
        floor_s, ceiling_s, cpu_s=lambda: clocks.cpu_s, now_s=lambda: clocks.now_s
    )


def test_a_saturated_connector_lingers_longer_up_to_the_ceiling() -> None:
    clocks = _Clocks()
    schedule = _schedule(clocks)
    seen = []
    for _ in range(6):
        clocks.run(busy=1.0)
        seen.append(schedule.linger_ms())
    assert seen[0] == pytest.approx(100 / TARGET_BUSY)  # in proportion to the CPU share
    assert seen == sorted(seen)
    assert seen[-1] == pytest.approx(500)  # half of lag_sla_s at the defaults: never more
    assert schedule.busy == pytest.approx(1.0)


def test_with_cpu_to_spare_it_shrinks_back_to_the_floor() -> None:
    clocks = _Clocks()
    schedule = _schedule(clocks)
    for _ in range(5):
        clocks.run(busy=1.0)
        schedule.linger_ms()
    longest = schedule.linger_ms()
    clocks.run(busy=0.05)
    assert schedule.linger_ms() == pytest.approx(longest / 2)  # halved at most per reading
    for _ in range(5):
        clocks.run(busy=0.05)
        schedule.linger_ms()
    assert schedule.linger_ms() == pytest.approx(100)


def test_a_busy_share_at_the_target_holds_it_and_readings_wait_a_second() -> None:
    clocks = _Clocks()
    schedule = _schedule(clocks)
    clocks.run(busy=1.0)
    held = schedule.linger_ms()
    clocks.run(busy=TARGET_BUSY)
    assert schedule.linger_ms() == pytest.approx(held)
    clocks.run(busy=1.0, seconds=EVERY_S / 2)  # not a reading yet: unchanged
    assert schedule.linger_ms() == pytest.approx(held)


def test_no_linger_configured_means_none_adapts() -> None:
    clocks = _Clocks()
    schedule = _schedule(clocks, floor_s=0.0)
    clocks.run(busy=1.0)
    assert schedule.linger_ms() == 0.0
