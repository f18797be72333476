"""A daemon's threads: all started before it serves, never one more however many jobs come."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from hifi.errors import HifiError
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
        # the loop may serve other tests: a default executor of its own again
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())
    assert _workers() == []


async def test_threads_the_system_refuses_are_a_one_line_error_and_none_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The third thread refused (as a low TasksMax refuses it): a `HifiError` that says so and
    names the limit, and the two started are joined."""
    real_start = threading.Thread.start
    starts: list[str] = []

    def start(thread: threading.Thread) -> None:
        starts.append(thread.name)
        if len(starts) == 3:
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(HifiError, match=r"^could not start 4 worker threads \(can't start new"):
        await start_threads(4)
    monkeypatch.undo()
    assert _workers() == []
