"""The capacity phase's destination, as its own process: at most N requests served at once, 503 beyond.

`python -m bench.capacity_server --schedule 8 --service-ms 100` serves at most 8 requests at
once, each for 100 ms; `--schedule 8,64@20,8@40` serves 8 from the first request, 64 from 20 s
after it and 8 again from 40 s. It prints `destination listening on URL` once ready (as
`devstack.destination_cli` does, so `bench.processes` finds it) and runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Sequence

import click

from devstack.destination import TestDestination

_FIRST_REQUEST_WAIT_S = 3600.0


def parse_schedule(text: str) -> list[tuple[float, int]]:
    """`8,64@20,8@40` -> [(0, 8), (20, 64), (40, 8)]: (seconds after the first request, N)."""
    steps: list[tuple[float, int]] = []
    for item in text.split(","):
        capacity, _, at = item.strip().partition("@")
        try:
            step = (float(at) if at else 0.0, int(capacity))
        except ValueError as exc:
            raise ValueError(f"schedule step {item!r} is not N or N@SECONDS") from exc
        if step[1] < 1 or (steps and step[0] <= steps[-1][0]):
            raise ValueError(f"schedule step {item!r}: N must be 1 or more, times increasing")
        steps.append(step)
    return steps


async def serve(schedule: list[tuple[float, int]], service_s: float) -> None:
    """Serve until SIGTERM, stepping the capacity through `schedule`."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    destination = TestDestination(record_bodies=False, keep_history=False)
    async with destination:
        destination.set_capacity(schedule[0][1], service_s=service_s)
        print(f"destination listening on {destination.url}", flush=True)
        stepping = asyncio.create_task(_step(destination, schedule, service_s))
        await stop.wait()
        stepping.cancel()
        await asyncio.gather(stepping, return_exceptions=True)


async def _step(
    destination: TestDestination, schedule: list[tuple[float, int]], service_s: float
) -> None:
    await destination.wait_for_requests(1, _FIRST_REQUEST_WAIT_S)
    first_s = asyncio.get_running_loop().time()
    for at_s, capacity in schedule[1:]:
        await asyncio.sleep(max(0.0, first_s + at_s - asyncio.get_running_loop().time()))
        destination.set_capacity(capacity, service_s=service_s)
        print(f"capacity {capacity}", flush=True)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--schedule", default="8", show_default=True, help="N, or N,N@SECONDS,...")
@click.option("--service-ms", type=click.FloatRange(min=0), default=100.0, show_default=True)
def main(schedule: str, service_ms: float) -> None:
    """Serve a destination of limited capacity until SIGTERM."""
    try:
        steps = parse_schedule(schedule)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--schedule") from exc
    asyncio.run(serve(steps, service_ms / 1000))


def run(argv: Sequence[str] | None = None) -> None:
    main(args=argv)


if __name__ == "__main__":
    run(sys.argv[1:])
