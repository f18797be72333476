"""Freed memory goes back to the system: the C allocator's free pages, while a daemon runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from hifi import allocators
from hifi.environment import ARROW_POOL_ENV, MALLOC_ARENAS_ENV

glibc_only = pytest.mark.skipif(allocators.glibc() is None, reason="malloc_trim is glibc's")

# 2,000-byte objects come from malloc (CPython's own allocator takes 512 bytes at most); one
# in 64 is kept, so no heap can shrink from its top and every freed page sits inside a heap
_FRAGMENTED_HEAP = textwrap.dedent(
    """
    from hifi.memory import release_unused, rss_bytes
    blocks = [bytes(2000) + bytes([i % 251]) for i in range(60_000)]
    kept = blocks[::64]
    full = rss_bytes()
    del blocks
    freed = rss_bytes()
    released = release_unused()
    print(full, freed, released.rss_after_bytes, released.released_bytes, len(kept))
    """
)


@pytest.mark.integration  # a process of its own: a heap the test runner has not touched
@glibc_only
def test_memory_freed_inside_a_heap_goes_back_to_the_system() -> None:
    """glibc keeps what is freed in the middle of its heaps (RSS stays up after `del`);
    `release_unused` hands those pages back, and says how much."""
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENTED_HEAP], capture_output=True, text=True, check=True
    ).stdout
    full, freed, after, released, _ = (int(n) for n in out.split())
    allocated = 60_000 * 2_000
    assert full - freed < allocated // 4, "the allocator kept the freed memory resident"
    assert freed - after > allocated * 0.6
    assert released == freed - after


# eight threads alive at once each allocate; glibc gives a new thread an arena of its own while there
# are fewer than the limit, and `malloc_stats` names each arena on stderr
_THREADS_ALLOCATING = textwrap.dedent(
    """
    import ctypes, sys, threading
    from hifi.allocators import settle_allocators
    if sys.argv[1] == "settled":
        settle_allocators()
    kept, together = [], threading.Barrier(8)
    def allocate():
        kept.append(bytes(100_000))
        together.wait()  # every thread alive at once, each holding its arena
    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ctypes.CDLL(None).malloc_stats()
    """
)


def _arenas(how: str, env: dict[str, str]) -> int:
    stderr = subprocess.run(
        [sys.executable, "-c", _THREADS_ALLOCATING, how],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stderr
    return stderr.count("Arena ")


@pytest.mark.integration
@glibc_only
def test_threads_share_a_few_arenas_unless_the_operator_chose_a_number() -> None:
    env = {k: v for k, v in os.environ.items() if k != MALLOC_ARENAS_ENV}
    assert _arenas("as_is", env) > allocators.ARENAS_MAX
    assert _arenas("settled", env) <= allocators.ARENAS_MAX
    assert _arenas("settled", {**env, MALLOC_ARENAS_ENV: "6"}) == 6


_ARROW_POOL = "from hifi.allocators import settle_allocators; import pyarrow as pa; "


@pytest.mark.integration
@pytest.mark.parametrize(
    ("script", "asked", "backend"),
    [
        (_ARROW_POOL + "settle_allocators()", None, "system"),  # loaded first
        (
            "from hifi.allocators import settle_allocators; settle_allocators(); import pyarrow as pa",
            None,
            "system",
        ),
        (_ARROW_POOL + "settle_allocators()", "mimalloc", "mimalloc"),
    ],
    ids=["arrow_loaded_before", "arrow_loaded_after", "operator_choice"],
)
def test_arrow_allocates_from_the_c_library_unless_the_operator_chose_a_pool(
    script: str, asked: str | None, backend: str
) -> None:
    """Arrow's own allocator keeps freed pages per thread, out of the trim's reach."""
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}
    if asked is not None:
        env[ARROW_POOL_ENV] = asked
    out = subprocess.run(
        [sys.executable, "-c", script + "; print(pa.default_memory_pool().backend_name)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert out.split() == [backend]
