"""Memory a daemon has freed, handed back to the system instead of kept by the C allocator.

CPython takes every object over 512 bytes (a record's value, a request's body, the table of a
large dict or set) and the native libraries take all theirs (pyroaring's bitmaps, orjson's
buffers) from the C library's `malloc`. glibc keeps what is freed inside its heaps for reuse and
hands pages back only from the top of a heap, so a daemon whose live memory is flat can still
climb in RSS for hours: the auditors of the soak did (`docs/reliability.md`, "The third hour").
Arrow (the auditor's archive, the retrier's dead-letter queries) brought an allocator of its
own, mimalloc, whose pages stay with the thread that used them: the archive writes run on the
default executor's threads, and the auditors' mimalloc arena kept tens of megabytes resident
while the pool had nothing allocated.

Each daemon's allocators are set at its start (`hifi.allocators.settle_allocators`, from
`hifi.cli.run_daemon_command`); `releasing_memory()` then calls `release_unused()` every
`RELEASE_EVERY_S` while it runs (`hifi.cli.run_daemon`): `malloc_trim(0)`, which since glibc 2.8
returns the free pages inside every heap, not only at its top, and the unused memory of Arrow's
pool if it is still Arrow's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import prometheus_client
import structlog

from hifi.allocators import trim_heaps
from hifi.background import in_background

__all__ = [
    "RELEASE_EVERY_S",
    "Released",
    "release_unused",
    "releasing_memory",
    "rss_bytes",
]

log = structlog.get_logger(__name__)

RELEASE_EVERY_S = 60.0
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")

RELEASED = prometheus_client.Counter(
    "hifi_memory_released_bytes",
    "Resident memory handed back to the system by the periodic malloc_trim (the drop in RSS).",
)
RELEASE_SECONDS = prometheus_client.Counter(
    "hifi_memory_release_seconds",
    "Time spent handing freed memory back to the system (malloc_trim blocks the event loop).",
)


def rss_bytes() -> int:
    """The process's resident memory now, from /proc (0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


@dataclass(frozen=True, slots=True)
class Released:
    """One release: resident memory before and after, and how long it took."""

    rss_before_bytes: int
    rss_after_bytes: int
    took_s: float

    @property
    def released_bytes(self) -> int:
        return max(0, self.rss_before_bytes - self.rss_after_bytes)


def release_unused() -> Released:
    """Hand the memory freed since the last call back to the system: every glibc heap's free
    pages, and the unused memory of Arrow's pool when it is not the C library's."""
    before, started = rss_bytes(), time.perf_counter()
    trim_heaps()
    arrow = sys.modules.get("pyarrow")  # never imported here
    if arrow is not None and arrow.default_memory_pool().backend_name != "system":
        arrow.default_memory_pool().release_unused()
    took_s = time.perf_counter() - started
    released = Released(before, rss_bytes(), took_s)
    RELEASED.inc(released.released_bytes)
    RELEASE_SECONDS.inc(took_s)
    return released


async def _release_every(every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        released = release_unused()
        log.debug(
            "memory_released",
            released_mb=round(released.released_bytes / 2**20, 1),
            rss_mb=round(released.rss_after_bytes / 2**20, 1),
            took_ms=round(released.took_s * 1000, 2),
        )


@contextlib.asynccontextmanager
async def releasing_memory() -> AsyncIterator[None]:
    """While the block runs, hand freed memory back to the system every `RELEASE_EVERY_S`."""
    async with in_background(_release_every(RELEASE_EVERY_S), name="memory-release"):
        yield
