"""A daemon's threads, all started before it serves: a fixed pool for the work that leaves the loop.

asyncio's default executor starts a thread whenever a job arrives while every thread it has is
busy, up to min(32, CPUs + 4), and keeps each for good. A daemon's thread count then follows the
most jobs in threads it ever ran at once (an archive write, a snapshot, a search for missing
ids, a body to compress), and rises at whatever moment that first happens: the soak's tenant
auditor started its fifth thread at minute 49 of the eighth hour (`docs/reliability.md`).

`start_threads()` gives the running loop a default executor of as many threads as asyncio's
would have at most, `WORKER_THREADS`, and starts every one of them at once: from ready on, a
daemon has the threads it will ever have, and a count that rises later is a leak. A job that
finds them all busy waits for one, as it did. The loop's own shutdown (`asyncio.Runner`) joins
them.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from hifi.errors import HifiError

__all__ = ["START_TIMEOUT_S", "WORKER_THREADS", "start_threads"]

WORKER_THREADS = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's own bound
START_TIMEOUT_S = 10.0
_NAME = "hifi-worker"


async def start_threads(count: int = WORKER_THREADS) -> ThreadPoolExecutor:
    """Set the running loop's default executor to `count` threads, every one started now; a
    `HifiError` if the system would not start them all (none is left running then)."""
    executor = ThreadPoolExecutor(max_workers=count, thread_name_prefix=_NAME)
    # each job waits for all the others: no thread is idle before the last one has started,
    # so the executor starts a thread for each
    arrived = threading.Barrier(count)
    try:
        started = [executor.submit(arrived.wait, START_TIMEOUT_S) for _ in range(count)]
        await asyncio.gather(*(asyncio.wrap_future(job) for job in started))
    except (RuntimeError, threading.BrokenBarrierError) as exc:
        arrived.abort()  # the threads that did start stop waiting
        executor.shutdown(wait=True, cancel_futures=True)
        raise HifiError(
            f"could not start {count} worker threads ({exc or type(exc).__name__}):"
            " is a limit on tasks (systemd's TasksMax, the container's pids limit) too low?"
        ) from None
    asyncio.get_running_loop().set_default_executor(executor)
    return executor
