"""What a lookup cache holds: its entries, read from a plain dict, expired by load time in a cachetools `TLRUCache`.

Reads need a dict read and nothing more (a `TLRUCache` read takes a timer call and a reordering,
many times as long), so the entries live twice: in `view`, which reads use, and in a `TLRUCache`
whose time-to-use is each entry's load time plus `expire_after_s`, which says what has expired.
Every change goes through `put` and `drop`, which keep the two the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from cachetools import TLRUCache

V = TypeVar("V")


@dataclass(slots=True)
class Entry(Generic[V]):
    """One key's value and when it was loaded, due for a reload, stale."""

    value: V
    raw: bytes  # as the source gave it: a reload that finds the same bytes decodes nothing
    loaded_s: float  # clock time the source last gave this value
    loaded_ms: int  # the same, wall clock (for the snapshot)
    stale_at_s: float  # reads from here on are stale (refresh_after_s after loaded_s)
    reload_at_s: float  # a read from here on queues a reload (jittered, or after a failure)
    check_at_s: float = 0.0  # the earlier of the two: the one comparison of a fresh read

    def __post_init__(self) -> None:
        self.check_at_s = min(self.stale_at_s, self.reload_at_s)

    def reload_later(self, at_s: float) -> None:
        """No reload before `at_s` (one just failed, or the source holds a bad value)."""
        self.reload_at_s = max(self.reload_at_s, at_s)
        self.check_at_s = min(self.stale_at_s, self.reload_at_s)


class Entries(Generic[V]):
    """Entries by key; `view` is for reads only, changes go through `put` and `drop`."""

    def __init__(self, expire_after_s: float, clock: Callable[[], float]) -> None:
        self.view: dict[str, Entry[V]] = {}
        self._expire_after_s = expire_after_s
        self._store: TLRUCache[str, Entry[V]] = TLRUCache(
            math.inf, ttu=self._expires_at, timer=clock
        )
        self.expired = 0  # entries dropped for their age (the caller reads and resets it)

    def __len__(self) -> int:
        return len(self.view)

    def put(self, key: str, entry: Entry[V], now: float) -> None:
        self.expire(now)  # a TLRUCache expires on every set: take those out of the view first
        self._store[key] = entry
        self.view[key] = entry

    def drop(self, key: str, now: float) -> None:
        self.expire(now)
        self._store.pop(key, None)
        self.view.pop(key, None)

    def expire(self, now: float) -> None:
        """Drop the entries loaded `expire_after_s` or more before `now`."""
        for key, entry in self._store.expire(now):
            if self.view.get(key) is entry:
                del self.view[key]
                self.expired += 1

    def oldest_loaded_s(self) -> float | None:
        return min((entry.loaded_s for entry in self.view.values()), default=None)

    def _expires_at(self, key: str, entry: Entry[V], now: float) -> float:
        return entry.loaded_s + self._expire_after_s
