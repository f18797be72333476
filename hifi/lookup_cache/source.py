"""Where a lookup cache's entries live (`Source`), how it refreshes them (`CacheSettings`), a lost source."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hifi.errors import StoreUnavailable


class Source(Protocol):
    """Where the entries live (a Redis hash: `hifi.lookup_cache.redis_hash.RedisHash`)."""

    def describe(self) -> str: ...

    async def read_all(self) -> dict[str, bytes]: ...

    async def read(self, keys: Sequence[str]) -> dict[str, bytes | None]: ...


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """How a cache refreshes; the first three come from the catalog's `[lookups]`."""

    refresh_after_s: float = 120.0
    expire_after_s: float = 2_592_000.0
    bulk_refresh_s: float = 300.0
    jitter: float = 0.1  # refreshes come up to this fraction of their interval early
    reloaders: int = 2  # background reads of due keys at once, at most
    reload_batch: int = 100  # keys per background read
    # a reloader woken by a due key waits this long for more (unless a batch is due already):
    # keys fall due one by one, and a read per key would cost a round trip each
    reload_gather_s: float = 0.1
    retry_min_s: float = 0.5  # a failed full load is tried again after this, doubling...
    retry_max_s: float = 30.0  # ...up to this (and never later than bulk_refresh_s)


def lost_entries(source: Source, held: int) -> StoreUnavailable:
    return StoreUnavailable(
        f"{source.describe()} is empty or missing: taken for a Redis that lost its data; the"
        f" {held} entries held keep serving (push them again with hifi-tenants)"
    )
