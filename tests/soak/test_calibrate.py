"""The stack's capacity: CPU read from /proc for real processes, and the arithmetic on it."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from soak.calibrate import capacity_of, cpu_cores_over, second_rate, stack_cpu_s


def test_the_capacity_is_where_a_line_through_the_two_steps_uses_every_spare_core() -> None:
    # beyond 0.2 idle: 0.3 cores at 1,000/s and 0.5 at 3,000/s -> 0.2 fixed + 100 µs an event
    measured = capacity_of(cores=2, idle_cores=0.2, steps=((1000, 0.5), (3000, 0.7)))

    assert measured.fixed_cores == pytest.approx(0.2)
    assert measured.cpu_per_event_us == pytest.approx(100.0)
    assert measured.events_per_s == pytest.approx(16_000.0)
    assert "16000 events/s" in measured.line()


def test_steps_that_contradict_a_line_fall_back_to_the_cost_of_the_higher_one() -> None:
    # the higher step cost less than the lower one (a noisy neighbour in the first)
    measured = capacity_of(cores=2, idle_cores=0.0, steps=((1000, 0.5), (4000, 0.4)))

    assert measured.fixed_cores == 0.0
    assert measured.cpu_per_event_us == pytest.approx(100.0)
    assert measured.events_per_s == pytest.approx(20_000.0)


def test_a_load_that_cost_nothing_measurable_gives_no_capacity_rather_than_infinity() -> None:
    measured = capacity_of(cores=2, idle_cores=0.5, steps=((1000, 0.4), (3000, 0.3)))

    assert measured.cpu_per_event_us == 0.0
    assert measured.events_per_s == 0.0


def test_the_second_step_asks_for_half_of_what_the_first_steps_cost_allows() -> None:
    # 0.4 cores beyond idle at 2,000/s -> 200 µs an event -> 1.8 spare cores last 9,000/s
    assert second_rate(cores=2, idle_cores=0.2, rate=2000, used=0.6) == pytest.approx(4500)
    # never below twice the first: two points apart enough to draw a line through
    assert second_rate(cores=2, idle_cores=0.2, rate=2000, used=2.0) == pytest.approx(4000)


@pytest.mark.integration
async def test_a_busy_process_counts_its_cores_and_a_sleeping_one_nearly_none() -> None:
    busy = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
    idle = await asyncio.create_subprocess_exec(  # blocked on its stdin until killed
        sys.executable, "-c", "import sys; sys.stdin.read()", stdin=asyncio.subprocess.PIPE
    )
    try:
        busy_cores = await cpu_cores_over([busy.pid], 1.0)
        idle_cores = await cpu_cores_over([idle.pid], 1.0)
    finally:
        for process in (busy, idle):
            process.kill()
            await process.wait()

    assert busy_cores > 0.3  # a shared machine may give it less than a whole core
    assert idle_cores < 0.05


@pytest.mark.integration
def test_a_process_gone_counts_nothing() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    assert stack_cpu_s([gone.pid]) == 0.0
