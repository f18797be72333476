"""Memory a daemon has freed, handed back to the system instead of kept by the C allocator.

CPython takes every object over 512 bytes (a record's value, a request's body, the table of a
large dict or set) and the native libraries take all theirs (pyroaring's bitmaps, orjson's
buffers) from the C library's `malloc`. glibc keeps what is freed inside its heaps for reuse and
hands pages back only from the top of a heap, so a daemon whose live memory is flat can still
climb in RSS for hours: the auditors of the soak did (`docs/reliability.md`, "The second hour").
Each thread that allocates may also get a heap (an arena) of its own, up to eight per core.
Arrow (the auditor's archive, the retrier's dead-letter queries) brings an allocator of its own,
mimalloc, whose pages stay with the thread that used them: the archive writes run on the
default executor's threads, and the auditors' mimalloc region kept 25-55 MB resident while the
pool had nothing allocated.

`settle_allocators()`, once at a daemon's start (`run_daemon`):

- at most `ARENAS_MAX` malloc arenas, unless `MALLOC_ARENA_MAX` says otherwise, so the few
  threads a daemon has share heaps instead of each keeping one;
- Arrow on the C library's allocator (`ARROW_DEFAULT_MEMORY_POOL=system`, unless it is set), so
  one allocator holds the freed memory and one trim returns it.

`release_unused()`, every `RELEASE_EVERY_S` while the daemon runs (`releasing_memory()`):
`malloc_trim(0)`, which since glibc 2.8 returns the free pages inside every heap, not only at its
top; and the unused memory of Arrow's pool if it is still Arrow's own. Off glibc the C library
is left as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import prometheus_client
import structlog

from hifi.background import in_background
from hifi.environment import ARROW_POOL_ENV, MALLOC_ARENAS_ENV

__all__ = [
    "ARENAS_MAX",
    "RELEASE_EVERY_S",
    "Released",
    "release_unused",
    "releasing_memory",
    "rss_bytes",
    "settle_allocators",
]

log = structlog.get_logger(__name__)

ARENAS_MAX = 2
RELEASE_EVERY_S = 60.0
_M_ARENA_MAX = -8  # mallopt's parameter, from glibc's malloc.h
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")

RELEASED = prometheus_client.Counter(
    "hifi_memory_released_bytes",
    "Resident memory handed back to the system by the periodic malloc_trim (the drop in RSS).",
)
RELEASE_SECONDS = prometheus_client.Counter(
    "hifi_memory_release_seconds",
    "Time spent handing freed memory back to the system (malloc_trim blocks the event loop).",
)


@cache
def _glibc() -> Any | None:
    """The C library when it is glibc (it has `malloc_trim` and `mallopt`), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        trim, mallopt = libc.malloc_trim, libc.mallopt
    except (OSError, AttributeError):  # musl has neither
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc


def settle_allocators(arenas: int = ARENAS_MAX) -> None:
    """At most `arenas` malloc arenas from now on, and Arrow on the C library's allocator; what
    the operator set in `MALLOC_ARENA_MAX` or `ARROW_DEFAULT_MEMORY_POOL` is left as it is."""
    libc = _glibc()
    if libc is not None and not os.environ.get(MALLOC_ARENAS_ENV):
        libc.mallopt(_M_ARENA_MAX, arenas)
    if os.environ.setdefault(ARROW_POOL_ENV, "system") == "system":
        arrow = sys.modules.get("pyarrow")  # loaded already: its default pool may be chosen
        if arrow is not None:
            arrow.set_memory_pool(arrow.system_memory_pool())


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
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
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
async def releasing_memory(every_s: float | None = None) -> AsyncIterator[None]:
    """While the block runs, hand freed memory back to the system every `every_s` seconds
    (`RELEASE_EVERY_S` unless given)."""
    period_s = RELEASE_EVERY_S if every_s is None else every_s
    async with in_background(_release_every(period_s), name="memory-release"):
        yield
