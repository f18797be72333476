"""The refresh-ahead cache on a fake clock and an in-memory source: reloads, failures, refusals, expiry, snapshot."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from hifi.errors import EntryRefused, StoreUnavailable
from hifi.lookup_cache.refresh_ahead import RefreshAheadCache
from hifi.lookup_cache.source import CacheSettings
from tests.helpers import until

SETTINGS = CacheSettings(
    refresh_after_s=10, expire_after_s=100, bulk_refresh_s=30, jitter=0, retry_max_s=5
)


class Clock:
    """Monotonic and wall time that move only when told."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s

    def wall_ms(self) -> int:
        return 1_700_000_000_000 + int(self.now_s * 1000)


class Hash:
    """An in-memory source that can be made to fail, counting what it is asked."""

    def __init__(self, entries: dict[str, bytes]) -> None:
        self.entries = entries
        self.down = False
        self.full_reads = 0
        self.key_reads: list[list[str]] = []

    def describe(self) -> str:
        return "hash h at memory://"

    async def read_all(self) -> dict[str, bytes]:
        self.full_reads += 1
        if self.down:
            raise StoreUnavailable("redis HGETALL h: ConnectionError: refused")
        return dict(self.entries)

    async def read(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        self.key_reads.append(list(keys))
        if self.down:
            raise StoreUnavailable("redis HMGET h: ConnectionError: refused")
        return {key: self.entries.get(key) for key in keys}


def decode(key: str, raw: bytes) -> str:
    if not raw.startswith(b"v"):
        raise EntryRefused(f"entry {key!r} is not a v-value")
    return raw.decode()


def make(
    source: Hash, clock: Clock, snapshot: Path | None = None, name: str = "c"
) -> RefreshAheadCache[str]:
    return RefreshAheadCache(
        source,
        decode,
        SETTINGS,
        dest="d",
        name=name,
        snapshot_path=snapshot,
        clock=clock,
        wall_ms=clock.wall_ms,
    )


async def test_reads_are_served_from_memory_and_refreshed_ahead() -> None:
    """Before a load nothing is served; after it reads return values; past refresh_after_s a
    read still returns the value at once and queues one reload, however often it is read."""
    clock, source = Clock(), Hash({"a": b"v1", "b": b"v1"})
    cache = make(source, clock)
    assert cache.get("a") is None
    assert not cache.readiness().ready
    assert await cache.refresh_all()
    assert cache.loaded.is_set()
    assert cache.readiness().ready
    assert cache.get("a") == "v1"
    assert await cache.reload_due() == 0
    source.entries["a"] = b"v2"
    clock.now_s += 10
    for _ in range(100):
        assert cache.get("a") == "v1"  # the current value, at once
    assert await cache.reload_due() == 1  # one reload, queued once
    assert source.key_reads == [["a"]]
    assert cache.get("a") == "v2"
    assert cache.stale_served == 100
    assert (cache.hits, cache.misses) == (102, 1)


async def test_failing_source_keeps_the_last_good_values_and_logs_once_per_change() -> None:
    """While the source fails every read is served, stale reads are counted, failures are
    logged once when they start and once when they end, and a failed key is not retried early."""
    clock, source = Clock(), Hash({"a": b"v1"})
    cache = make(source, clock)
    await cache.refresh_all()
    source.down = True
    clock.now_s += 5
    with capture_logs() as logs:
        for _ in range(3):
            clock.now_s += 5
            assert cache.get("a") == "v1"
            assert await cache.reload_due() == 1
            assert not await cache.refresh_all()
        cache.get("a")
        assert await cache.reload_due() == 0  # not due again before the retry delay
        assert "failing" in cache.readiness().detail
        source.down = False
        clock.now_s += 5
        cache.get("a")
        assert await cache.reload_due() == 1
        assert await cache.refresh_all()
    assert [entry["event"] for entry in logs] == [
        "lookup_source_failing",
        "lookup_source_recovered",
    ]
    assert logs[1]["failures"] == 6
    assert cache.stale_served == 5
    sample = REGISTRY.get_sample_value
    assert sample("hifi_lookup_refresh_failures_total", {"dest": "d", "cache": "c", "kind": "full"})


async def test_a_bad_entry_is_refused_and_the_previous_value_keeps_serving() -> None:
    """A value the decoder refuses is logged once with its reason (never its text) and counted;
    the previous good value is served; a key never good serves nothing."""
    clock, source = Clock(), Hash({"a": b"v1"})
    cache = make(source, clock, name="refusals")
    await cache.refresh_all()
    source.entries.update({"a": b"{not json secret-ish", "b": b"garbage"})
    with capture_logs() as logs:
        await cache.refresh_all()
        await cache.refresh_all()
    assert cache.get("a") == "v1"
    assert cache.get("b") is None
    refused = [entry for entry in logs if entry["event"] == "lookup_entry_refused"]
    assert [(entry["key"], entry["serving"]) for entry in refused] == [
        ("a", "the previous good value"),
        ("b", "nothing for this key"),
    ]
    assert all("secret-ish" not in str(entry) for entry in logs)
    labels = {"dest": "d", "cache": "refusals"}
    assert REGISTRY.get_sample_value("hifi_lookup_refused_entries_total", labels) == 4


async def test_removed_and_expired_entries_stop_serving() -> None:
    """A key the source no longer holds is dropped by the next full load (a key reload keeps it:
    a removed key and a lost hash look alike there); an empty source is taken for lost data; a
    value not loaded again for expire_after_s is dropped while the source is down."""
    clock, source = Clock(), Hash({"a": b"v1", "b": b"v1", "c": b"v1"})
    cache = make(source, clock, name="removals")
    await cache.refresh_all()
    del source.entries["a"]
    await cache.reload(["a"])
    assert cache.get("a") == "v1"
    await cache.refresh_all()
    assert cache.get("a") is None
    kept = dict(source.entries)
    source.entries.clear()
    assert not await cache.refresh_all()
    assert (cache.get("b"), cache.get("c")) == ("v1", "v1")
    assert "is empty or missing" in cache.readiness().detail
    source.entries.update(kept)
    source.down = True
    clock.now_s += 99
    assert cache.expire_due() == 0
    assert cache.get("c") == "v1"
    clock.now_s += 1
    assert cache.expire_due() == 2
    assert (cache.get("b"), cache.get("c")) == (None, None)


async def test_snapshot_makes_a_restart_ready_while_the_source_is_down(tmp_path: Path) -> None:
    """A full load writes the snapshot (mode 0600); a cache that cannot reach the source
    serves it with the entries' ages kept, and readiness says so."""
    clock, source = Clock(), Hash({"a": b"v1", "b": b"v1"})
    path = tmp_path / "state" / "d.c.snapshot"
    first = make(source, clock, path)
    await first.refresh_all()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    clock.now_s += 60
    source.down = True
    second = make(source, clock, path)
    assert not await second.refresh_all()
    assert not second.readiness().ready
    assert second.load_snapshot()
    assert second.get("a") == "v1"
    readiness = second.readiness()
    assert readiness.ready
    assert f"2 entries from the snapshot {path} written 60 s ago" in readiness.detail
    assert second.reading().oldest_value_age_s == pytest.approx(60, abs=0.01)
    clock.now_s += 40  # 100 s since the values were loaded: expired
    second.expire_due()
    assert len(second) == 0


async def test_not_ready_says_why(tmp_path: Path) -> None:
    """Without a load or a usable snapshot, readiness names the failing source and the snapshot."""
    clock, source = Clock(), Hash({})
    source.down = True
    cache = make(source, clock, tmp_path / "none.snapshot")
    await cache.refresh_all()
    assert not cache.load_snapshot()
    readiness = cache.readiness()
    assert not readiness.ready
    assert "not loaded yet: hash h at memory:// failing: redis HGETALL h" in readiness.detail
    assert f"no snapshot at {tmp_path / 'none.snapshot'}" in readiness.detail


async def test_running_cache_reloads_due_keys_in_the_background() -> None:
    """With the cache running, a read past refresh_after_s is answered at once and the
    reloaders bring the new value in, in one batched read."""
    clock, source = Clock(), Hash({"a": b"v1", "b": b"v1"})
    cache = make(source, clock)
    async with cache.running():
        await asyncio.wait_for(cache.loaded.wait(), 5)
        source.entries.update({"a": b"v2", "b": b"v2"})
        clock.now_s += 10
        assert (cache.get("a"), cache.get("b")) == ("v1", "v1")
        assert await until(lambda: cache.get("a") == "v2" and cache.get("b") == "v2", 5, 0.01)
    assert source.key_reads == [["a", "b"]]
    assert source.full_reads == 1


async def test_keys_falling_due_apart_are_gathered_into_one_read() -> None:
    """Keys read past refresh_after_s one after another, within `reload_gather_s`, share one
    read of the source instead of a round trip each."""
    keys = [f"k{i}" for i in range(20)]
    clock, source = Clock(), Hash({key: b"v1" for key in keys})
    cache = make(source, clock)
    async with cache.running():
        await asyncio.wait_for(cache.loaded.wait(), 5)
        clock.now_s += 10
        for key in keys:
            assert cache.get(key) == "v1"
            await asyncio.sleep(SETTINGS.reload_gather_s / 100)
        assert await until(lambda: sum(map(len, source.key_reads)) == len(keys), 5, 0.01)
    assert len(source.key_reads) <= 2  # each reloader's first wait gathers what follows it


async def test_accepted_sees_new_values_before_reads_do() -> None:
    """The `accepted` hook gets every newly decoded value of a load, once, before it is served."""
    clock, source = Clock(), Hash({"a": b"v1"})
    seen: list[list[str]] = []
    cache: RefreshAheadCache[str] = RefreshAheadCache(
        source,
        decode,
        SETTINGS,
        dest="d",
        name="hook",
        accepted=lambda values: seen.append(sorted(values)),
        clock=clock,
        wall_ms=clock.wall_ms,
    )
    await cache.refresh_all()
    await cache.refresh_all()  # the same bytes: nothing new
    source.entries["a"] = b"v2"
    await cache.refresh_all()
    assert seen == [["v1"], [], ["v2"]]


def test_metrics_are_exposed_per_cache() -> None:
    """Hits, misses, stale reads, entries and ages are scraped from the cache itself."""
    clock, source = Clock(), Hash({"a": b"v1"})
    cache = make(source, clock, name="scraped")
    asyncio.run(cache.refresh_all())
    cache.get("a")
    cache.get("zz")
    clock.now_s += 12
    cache.get("a")
    labels = {"dest": "d", "cache": "scraped"}
    sample = REGISTRY.get_sample_value
    assert sample("hifi_lookup_entries", labels) == 1
    assert sample("hifi_lookup_hits_total", labels) == 2
    assert sample("hifi_lookup_misses_total", labels) == 1
    assert sample("hifi_lookup_stale_served_total", labels) == 1
    assert sample("hifi_lookup_oldest_value_age_seconds", labels) == 12
    assert sample("hifi_lookup_last_full_refresh_age_seconds", labels) == 12
    assert sample("hifi_lookup_refreshes_total", {**labels, "kind": "full"}) == 1
