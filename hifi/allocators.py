"""The C library's and Arrow's allocators, set for a long-running process before anything loads.

Light on purpose: a daemon's `main()` calls `settle_allocators()` first thing, before its
command (and Arrow, which reads its variable once) is imported. Why these settings, and the
periodic release that goes with them: `hifi/memory.py`.

- At most `ARENAS_MAX` malloc arenas, unless `MALLOC_ARENA_MAX` says otherwise: the few threads
  a daemon has (the default executor's) share heaps instead of each keeping one.
- Arrow on the C library's allocator (`ARROW_DEFAULT_MEMORY_POOL=system`, unless it is set):
  Arrow's own, mimalloc, keeps each thread's freed pages, out of `malloc_trim`'s reach.

Off glibc (musl) the C library is left as it is.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import cache
from typing import Any

from hifi.environment import ARROW_POOL_ENV, MALLOC_ARENAS_ENV

__all__ = ["ARENAS_MAX", "glibc", "settle_allocators", "trim_heaps"]

ARENAS_MAX = 2
_M_ARENA_MAX = -8  # mallopt's parameter, from glibc's malloc.h


@cache
def glibc() -> Any | None:
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
    libc = glibc()
    if libc is not None and not os.environ.get(MALLOC_ARENAS_ENV):
        libc.mallopt(_M_ARENA_MAX, arenas)
    if os.environ.setdefault(ARROW_POOL_ENV, "system") == "system":
        # Arrow loaded already has read the variable: its pool for pyarrow's calls, at least
        arrow = sys.modules.get("pyarrow")
        if arrow is not None:
            arrow.set_memory_pool(arrow.system_memory_pool())


def trim_heaps() -> None:
    """glibc's `malloc_trim(0)`: the free pages inside every heap back to the system."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)
