"""A refresh-ahead local cache: reads from memory, reloads in the background, last good values while the source is down.

Caffeine's refresh-after-write and expire-after-write, for asyncio (docs/tenants.md):

- `running()` loads every entry first; until one full load (or the snapshot) succeeded,
  `readiness()` is not ready and says why. After each full load the last good entries are
  written to a snapshot file; a process that starts while the source is down becomes ready
  from it, and says so with its age.
- `get(key)` is a dict read and never awaits anything. After `refresh_after_s` since the key
  was loaded (up to `jitter` of it earlier) the read still returns the value at once and queues
  the key for one background reload: single-flight (a key is queued or loading once), batched
  (one read of up to `reload_batch` keys, gathered for `reload_gather_s`), at most `reloaders`
  reads at once, each a task the cache keeps and cancels when it stops.
- every `bulk_refresh_s` (jittered) every entry is loaded again, so changes and removals reach
  every process; a key the source no longer holds is dropped then. An empty (or missing) hash
  while entries are held is taken for a source that lost its data, not for "no entries": a
  failure, and the entries held keep serving.
- while the source fails (down, slow, failing over), the last good values keep serving until
  `expire_after_s` after they were last loaded (a cachetools `TLRUCache` orders them by that);
  reads never wait for it. Failures are counted, and logged once when the source starts
  failing and once when it recovers; full loads are retried with a growing backoff, keys whose
  reload failed are not tried again before it.
- a value the decoder refuses (`EntryRefused`: not JSON, wrong types) is counted and logged once
  per distinct bad value; the previous good value keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog

from hifi.errors import EntryRefused, HifiError
from hifi.lookup_cache import metrics as lookup_metrics
from hifi.lookup_cache.background import BackgroundLoops
from hifi.lookup_cache.entries import Entries, Entry
from hifi.lookup_cache.refusals import RefusedValues
from hifi.lookup_cache.snapshot import Snapshot, SnapshotFile
from hifi.lookup_cache.source import CacheSettings, Source, lost_entries
from hifi.lookup_cache.source_health import SourceHealth
from hifi.ops_http import Readiness

log = structlog.get_logger(__name__)

V = TypeVar("V")
T = TypeVar("T")


class RefreshAheadCache(Generic[V]):
    """Entries of one `Source`, decoded by `decode(key, raw)`, served from memory."""

    def __init__(
        self,
        source: Source,
        decode: Callable[[str, bytes], V],
        settings: CacheSettings,
        *,
        dest: str,
        name: str,
        snapshot_path: Path | None = None,
        accepted: Callable[[Iterable[V]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        """`accepted` sees every newly decoded value of a load before any read can return it
        (e.g. to register its secrets for masking)."""
        self._source = source
        self._decode = decode
        self.settings = settings
        self.dest, self.name = dest, name
        self._snapshot = SnapshotFile(snapshot_path, dest)
        self._loops = BackgroundLoops(dest, name)
        self._accepted = accepted or (lambda values: None)
        self._clock, self._wall_ms = clock, wall_ms
        self._entries: Entries[V] = Entries(settings.expire_after_s, clock)
        self._view = self._entries.view  # what reads see (changes go through `_entries`)
        self._wanted: dict[str, None] = {}  # keys queued for a reload, in order
        self._loading: set[str] = set()
        self._wake = asyncio.Event()
        self._refused = RefusedValues(dest, name)
        self.loaded = asyncio.Event()  # set once a full load or the snapshot succeeded
        self.hits = self.misses = self.stale_served = 0
        self._last_full_s: float | None = None
        # the snapshot the cache serves until a full load succeeds, if it started from one
        self._from_snapshot: Snapshot | None = None
        self._health = SourceHealth(dest=dest, cache=name, source=source.describe(), clock=clock)
        lookup_metrics.CACHES.track(dest, name, self.reading)

    # --- reads (the delivery path) -----------------------------------------------------

    def get(self, key: str) -> V | None:
        """The value of `key` from memory, or None; never waits. A read of a value due for a
        reload queues the key for one background reload and returns the value as it is."""
        entry = self._view.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        if entry.check_at_s <= self._clock():
            self._due(key, entry)
        return entry.value

    def _due(self, key: str, entry: Entry[V]) -> None:
        now = self._clock()
        if entry.stale_at_s <= now:
            self.stale_served += 1
        if entry.reload_at_s <= now and key not in self._wanted and key not in self._loading:
            self._wanted[key] = None
            self._wake.set()

    def __len__(self) -> int:
        return len(self._view)

    # --- lifecycle ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[RefreshAheadCache[V]]:
        """Load, then keep loading in the background until the block exits; `loaded` is set
        once entries are served (wait for it before relying on reads)."""
        tasks = [asyncio.create_task(self._maintain(), name=f"lookups-{self.name}-maintain")]
        tasks += [
            asyncio.create_task(self._reload_queued(), name=f"lookups-{self.name}-reload{i}")
            for i in range(self.settings.reloaders)
        ]
        for task in tasks:
            task.add_done_callback(self._loops.ended)
        try:
            yield self
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _maintain(self) -> None:
        """Full loads: at start, every `bulk_refresh_s`, and with a backoff while failing."""
        settings = self.settings
        backoff_s = settings.retry_min_s
        while True:
            loaded = await self._loops.guarded(self._maintain_once())
            if loaded:
                delay_s, backoff_s = self._jittered(settings.bulk_refresh_s), settings.retry_min_s
            else:
                delay_s = min(backoff_s, settings.bulk_refresh_s)
                backoff_s = min(backoff_s * 2, settings.retry_max_s)
            await asyncio.sleep(delay_s)

    async def _maintain_once(self) -> bool:
        loaded = await self.refresh_all()
        if not loaded and not self.loaded.is_set() and self._from_snapshot is None:
            self.load_snapshot()
        self.expire_due()
        return loaded

    async def _reload_queued(self) -> None:
        """One reloader: read the queued keys in batches, as long as there are some; a batch
        not yet full waits `reload_gather_s` for the keys falling due after the first."""
        while True:
            await self._wake.wait()
            if len(self._wanted) < self.settings.reload_batch:
                await asyncio.sleep(self.settings.reload_gather_s)
            if not await self._loops.guarded(self.reload_due()):
                self._wake.clear()

    async def reload_due(self) -> int:
        """Reload the first `reload_batch` keys that reads queued; how many."""
        keys = list(itertools.islice(self._wanted, self.settings.reload_batch))
        for key in keys:
            del self._wanted[key]
        if keys:
            await self.reload(keys)
        return len(keys)

    # --- loads ---------------------------------------------------------------------------

    async def refresh_all(self) -> bool:
        """One full load: every entry the source holds replaces what is held; True on success."""
        started_s = self._clock()
        try:
            found = await self._source.read_all()
        except HifiError as exc:
            self._health.failed("full", exc, serving=len(self._view))
            return False
        if not found and self._view:
            self._health.failed(
                "full", lost_entries(self._source, len(self._view)), serving=len(self._view)
            )
            return False
        now = self._clock()
        for key in [key for key in self._view if key not in found]:
            self._entries.drop(key, now)
            self._refused.cleared(key)
        self._apply(found, now)
        self._health.succeeded("full", started_s)
        self._last_full_s = now
        self._from_snapshot = None
        self.loaded.set()
        await self._snapshot.write(
            self._source.describe(),
            self._wall_ms(),
            {key: (entry.raw, entry.loaded_ms) for key, entry in self._view.items()},
        )
        return True

    async def reload(self, keys: Sequence[str]) -> None:
        """Reload `keys` (queued by reads). A key the source does not hold is kept until the
        next full load (which drops it): a missing hash and a removed key look the same here."""
        self._loading.update(keys)
        started_s = self._clock()
        try:
            found = await self._source.read(keys)
        except HifiError as exc:
            self._health.failed("key", exc, serving=len(self._view))
            retry_at_s = self._clock() + self._retry_after_s()
            for key in keys:
                entry = self._view.get(key)
                if entry is not None:
                    entry.reload_later(retry_at_s)
            return
        finally:
            self._loading.difference_update(keys)
        now = self._clock()
        for key in [key for key, raw in found.items() if raw is None]:
            entry = self._view.get(key)
            if entry is not None:
                entry.reload_later(now + self._jittered(self.settings.refresh_after_s))
        self._apply({key: raw for key, raw in found.items() if raw is not None}, now)
        self._health.succeeded("key", started_s)

    def load_snapshot(self) -> bool:
        """Serve the snapshot's entries (when no load has succeeded yet); True if it could."""
        now, now_ms = self._clock(), self._wall_ms()
        found = self._snapshot.read_fresh(now_ms, self.settings.expire_after_s)
        if found is None:
            return False
        snapshot, fresh = found
        self._apply({key: raw for key, (raw, _) in fresh.items()}, now, loaded_ms=fresh)
        self._from_snapshot = snapshot
        self.loaded.set()
        log.warning(
            "lookup_loaded_from_snapshot",
            dest=self.dest,
            cache=self.name,
            entries=len(self._view),
            snapshot=str(self._snapshot.path),
            age_s=round((now_ms - snapshot.written_ms) / 1000, 1),
            expired=len(snapshot.entries) - len(fresh),
        )
        return True

    def expire_due(self) -> int:
        """Drop the entries not loaded for `expire_after_s`; how many (logged once per call)."""
        self._entries.expire(self._clock())
        expired, self._entries.expired = self._entries.expired, 0
        if expired:
            log.warning(
                "lookup_entries_expired",
                dest=self.dest,
                cache=self.name,
                entries=expired,
                expire_after_s=self.settings.expire_after_s,
            )
        return expired

    def _apply(
        self,
        found: Mapping[str, bytes],
        now: float,
        *,
        loaded_ms: Mapping[str, tuple[bytes, int]] | None = None,
    ) -> None:
        """Take the values a load found: same bytes re-arm the entry, new ones are decoded."""
        fresh: dict[str, tuple[V, bytes]] = {}
        confirmed: list[tuple[str, Entry[V]]] = []
        for key, raw in found.items():
            entry = self._view.get(key)
            if entry is not None and entry.raw == raw:
                confirmed.append((key, entry))
                continue
            try:
                fresh[key] = (self._decode(key, raw), raw)
            except EntryRefused as exc:
                self._refused.note(key, raw, exc, kept=entry is not None)
                if entry is not None:  # keep serving it; try again at its next refresh
                    entry.reload_later(now + self._jittered(self.settings.refresh_after_s))
                continue
            self._refused.cleared(key)
        self._accepted(value for value, _ in fresh.values())
        wall_ms = self._wall_ms()
        for key, entry in confirmed:
            self._put(key, entry.value, entry.raw, now, wall_ms, loaded_ms)
        for key, (value, raw) in fresh.items():
            self._put(key, value, raw, now, wall_ms, loaded_ms)

    def _put(
        self,
        key: str,
        value: V,
        raw: bytes,
        now: float,
        wall_ms: int,
        restored: Mapping[str, tuple[bytes, int]] | None,
    ) -> None:
        age_s = 0.0
        if restored is not None:  # from a snapshot: the value is as old as it was then
            age_s = max(0.0, (wall_ms - restored[key][1]) / 1000)
        loaded_s = now - age_s
        refresh_s = self.settings.refresh_after_s
        entry = Entry(
            value,
            raw,
            loaded_s,
            wall_ms - round(age_s * 1000),
            loaded_s + refresh_s,
            loaded_s + self._jittered(refresh_s),
        )
        self._entries.put(key, entry, now)

    def _jittered(self, interval_s: float) -> float:
        return interval_s * (1 - self.settings.jitter * random.random())

    def _retry_after_s(self) -> float:
        return min(self.settings.retry_max_s, self.settings.refresh_after_s)

    # --- what operators see ---------------------------------------------------------------

    def readiness(self) -> Readiness:
        """Ready once entries are served; the detail says from where and how old, or why not."""
        source = self._source.describe()
        health = self._health
        failing = f"{source} failing: {health.last_error}" if health.failing else ""
        if not self.loaded.is_set():
            why = failing or f"loading from {source}"
            problem = self._snapshot.problem
            snapshot = f"; {problem}" if problem else ""
            return Readiness(False, f"{self.name}: not loaded yet: {why}{snapshot}")
        if self._from_snapshot is not None:
            age_s = (self._wall_ms() - self._from_snapshot.written_ms) / 1000
            return Readiness(
                True,
                f"{self.name}: {len(self._view)} entries from the snapshot {self._snapshot.path}"
                f" written {age_s:.0f} s ago; {failing or f'{source} not loaded yet'}",
            )
        age = self.reading().last_full_refresh_age_s or 0.0
        state = f"; {failing}, serving the last good values" if failing else ""
        return Readiness(
            True,
            f"{self.name}: {len(self._view)} entries, last full load from {source} {age:.0f} s"
            f" ago{state}",
        )

    def status(self) -> dict[str, Any]:
        """What `/status` shows of the cache (no value of any entry)."""
        readiness = self.readiness()
        return {
            "source": self._source.describe(),
            "ready": readiness.ready,
            "detail": readiness.detail,
            "failing": self._health.failing,
            **dataclasses.asdict(self.reading()),
        }

    def reading(self) -> lookup_metrics.Reading:
        """Counts and ages for the metrics and `/status`."""
        now = self._clock()
        oldest = self._entries.oldest_loaded_s()
        if self._last_full_s is not None:
            since_full: float | None = now - self._last_full_s
        elif self._from_snapshot is not None:
            since_full = (self._wall_ms() - self._from_snapshot.written_ms) / 1000
        else:
            since_full = None
        return lookup_metrics.Reading(
            entries=len(self._view),
            hits=self.hits,
            misses=self.misses,
            stale_served=self.stale_served,
            oldest_value_age_s=None if oldest is None else now - oldest,
            last_full_refresh_age_s=since_full,
        )
