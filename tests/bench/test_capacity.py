"""The capacity phase's arithmetic: its schedule, its ratios, its switch times and its summary field."""

from __future__ import annotations

import pytest

from bench.capacity import CapacityPhase, Run, _time_to_reach
from bench.capacity_server import parse_schedule
from bench.run import summary_line


def test_schedule_steps_and_their_errors() -> None:
    """`8,64@20,8@40` is N from the first request, then at 20 s and 40 s; bad steps are named."""
    assert parse_schedule("8") == [(0.0, 8)]
    assert parse_schedule("8,64@20,8@40") == [(0.0, 8), (20.0, 64), (40.0, 8)]
    with pytest.raises(ValueError, match="'x@3'"):
        parse_schedule("8,x@3")
    with pytest.raises(ValueError, match="times increasing"):
        parse_schedule("8,64@20,8@10")


def _phase(adaptive_8: float, adaptive_64: float, switch_s: list[float | None]) -> CapacityPhase:
    fixed = {8: {1: 100.0, 8: 800.0, 64: 780.0}, 64: {8: 800.0, 64: 6000.0}}
    p95 = {"adaptive@8": 110.0, "fixed64@8": 3000.0}
    return CapacityPhase(fixed, {8: adaptive_8, 64: adaptive_64}, p95, switch_s, 0)


def test_the_ratio_is_the_lower_n_and_the_targets() -> None:
    """`arc_vs_best_fixed` is adaptive over the best fixed for the N where it is lower; the
    targets hold only with both at 0.9 or more and both switches within 30 s."""
    phase = _phase(760.0, 5100.0, [6.5, 3.0])
    assert phase.arc_vs_best_fixed == pytest.approx(0.85)
    assert not phase.held()
    assert _phase(760.0, 5700.0, [6.5, 3.0]).held()
    assert not _phase(760.0, 5700.0, [None, 3.0]).held()
    assert phase.report()["best_fixed_events_per_s"] == {"8": 800.0, "64": 6000.0}


def test_time_to_reach_a_rate_after_a_change() -> None:
    """The seconds after a change until the sliding 2 s rate first reaches the target."""
    run = Run("switch")
    run.done_s = [t / 100 for t in range(0, 1000)] + [10 + t / 1000 for t in range(0, 10_000)]
    # 100 batches (1,000 events) a second until 10 s, then 1,000 batches (10,000 events)
    assert _time_to_reach(run, 10.0, 20.0, 9000.0) == pytest.approx(2.0, abs=0.25)
    assert _time_to_reach(run, 10.0, 20.0, 20000.0) is None


def test_the_bench_summary_ends_with_the_capacity_field() -> None:
    """`make bench`'s last line carries `arc_vs_best_fixed` after the lookup fields."""
    line = summary_line(
        0.5, 40, 75000, 150, lookups="lookup_ratio=0.27", capacity="arc_vs_best_fixed=0.93"
    )
    assert line.endswith("lookup_ratio=0.27 arc_vs_best_fixed=0.93")
