"""The rate the whole stack carries on this machine, measured with the stack running.

`make bench` measures one connector alone on the machine. In the soak, ten processes share its
cores: three connectors, two retriers, two auditors, ingest, the broker, and this process (the
load and both destinations). A third of one connector's capacity overloaded them, with no fault
yet (docs/reliability.md, "The soak").

So the stack is measured too, before the timed run: idle for `IDLE_S`, then under two warm-up
loads (the run's mix of sources), every process's CPU read from /proc. What the load costs on
top of idle is not proportional to the rate: the tenant destination's requests grow with the
tenants that have events, up to one each per linger, and the dev broker spends CPU on each
caught-up consumer whatever the rate. So the first step runs at `FIRST_SHARE` of the
connector's capacity, the second at half of what the first step's cost would allow, and a line
through the two, CPU = a + b x rate (the rate each step delivered, not the one offered: a
stack that falls behind looks cheap), gives the stack's capacity: the rate at which the spare
cores (all of them, less the idle stack's) would be used up.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable

from bench.measure import read_cpu_s
from soak.model import StackCapacity

IDLE_S = 10.0
STEP_S = 50.0
# a step's first seconds are not measured: connections, first fetches, and the dev broker, whose
# CPU under a new load rose for about 40 s before it held
STEP_SETTLE_S = 30.0
FIRST_SHARE = 1 / 40


def stack_cpu_s(pids: Iterable[int]) -> float:
    """User + system CPU seconds of these processes so far (a process gone counts 0)."""
    return sum(read_cpu_s(pid) or 0.0 for pid in pids)


async def cpu_cores_over(pids: list[int], seconds: float) -> float:
    """The cores these processes used, on average, over the next `seconds`."""
    before_cpu, before = stack_cpu_s(pids), time.monotonic()
    await asyncio.sleep(seconds)
    return (stack_cpu_s(pids) - before_cpu) / (time.monotonic() - before)


def capacity_of(
    *, cores: int, idle_cores: float, steps: tuple[tuple[float, float], tuple[float, float]]
) -> StackCapacity:
    """The stack's capacity from its idle CPU and two loaded steps, (rate, cores used)."""
    (rate_1, used_1), (rate_2, used_2) = steps
    extra_1, extra_2 = max(used_1 - idle_cores, 0.0), max(used_2 - idle_cores, 0.0)
    slope = (extra_2 - extra_1) / (rate_2 - rate_1) if rate_2 != rate_1 else 0.0
    fixed = extra_1 - slope * rate_1
    if slope <= 0 or fixed < 0:  # noise, or no fixed part: proportional to the higher step
        slope, fixed = (extra_2 / rate_2 if rate_2 > 0 else 0.0), 0.0
    return StackCapacity(
        cores=cores,
        idle_cores=idle_cores,
        fixed_cores=fixed,
        cpu_per_event_us=slope * 1e6,
        steps=steps,
    )


def second_rate(*, cores: int, idle_cores: float, rate: float, used: float) -> float:
    """The second step's rate: half the rate the first step's cost per event would allow."""
    extra, rate = max(used - idle_cores, 1e-3), max(rate, 1.0)
    return max(rate * 2, 0.5 * max(0.0, cores - idle_cores) / (extra / rate))


def machine_cores() -> int:
    return len(os.sched_getaffinity(0))
