"""A daemon's threads: all started before it serves, never one more however many jobs come."""

from __future__ import annotations

import asyncio
import threading

from hifi.threads import start_threads


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("hifi-worker")]


async def test_every_thread_is_started_at_once_and_no_job_adds_one() -> None:
    """Three threads as soon as it returns; twelve jobs in threads at once, each blocking until
    all twelve were asked for, still run on those three (the default executor would start up
    to CPUs + 4)."""
    executor = await start_threads(3)
    try:
        assert len(_workers()) == 3
        release = threading.Event()
        ran: set[str] = set()

        def job() -> None:
            ran.add(threading.current_thread().name)
            release.wait(5.0)

        jobs = [asyncio.ensure_future(asyncio.to_thread(job)) for _ in range(12)]
        await asyncio.sleep(0.2)
        assert len(_workers()) == 3
        release.set()
        await asyncio.gather(*jobs)
        assert len(ran) == 3
        assert len(_workers()) == 3
    finally:
        executor.shutdown(wait=True)
    assert _workers() == []
