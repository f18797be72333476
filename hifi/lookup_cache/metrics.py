"""Prometheus metrics of the lookup caches (`hifi.lookup_cache.refresh_ahead`), labelled by destination and cache.

Reads happen once per event, so what they count (hits, misses, stale values served) is kept in
plain integers on each cache and exposed by a collector when scraped, like the connector's
`PerEventHistogram`; ages and sizes are computed at the scrape too. Refreshes and failures are
rare and use ordinary counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

LABELS = ("dest", "cache")
KINDS = ("full", "key")  # a load of every entry, or a reload of some keys

REFRESHES = Counter(
    "hifi_lookup_refreshes",
    "Loads from the source that succeeded: full (every entry) or key (entries read after"
    " refresh_after_s, reloaded in the background).",
    [*LABELS, "kind"],
)
REFRESH_FAILURES = Counter(
    "hifi_lookup_refresh_failures",
    "Loads from the source that failed (unreachable, timed out, refused); the last good values"
    " keep serving.",
    [*LABELS, "kind"],
)
REFUSED_ENTRIES = Counter(
    "hifi_lookup_refused_entries",
    "Entries the source holds that cannot be used (not JSON, wrong types); the previous good"
    " value, if any, keeps serving.",
    LABELS,
)


@dataclass(frozen=True, slots=True)
class Reading:
    """What a cache reports at a scrape."""

    entries: int
    hits: int
    misses: int
    stale_served: int
    oldest_value_age_s: float | None  # None: no entry
    last_full_refresh_age_s: float | None  # None: never loaded


class _Caches(Collector):
    """The live caches' per-read counts, sizes and ages, read when scraped."""

    def __init__(self) -> None:
        self._readers: dict[tuple[str, str], Callable[[], Reading]] = {}

    def track(self, dest: str, cache: str, reading: Callable[[], Reading]) -> None:
        """Report this cache from now on (replacing one of the same labels), with its series at 0."""
        self._readers[dest, cache] = reading
        for kind in KINDS:
            REFRESHES.labels(dest, cache, kind)
            REFRESH_FAILURES.labels(dest, cache, kind)
        REFUSED_ENTRIES.labels(dest, cache)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        entries = GaugeMetricFamily(
            "hifi_lookup_entries", "Entries held in memory, served to every read.", labels=LABELS
        )
        hits = CounterMetricFamily(
            "hifi_lookup_hits", "Reads that found an entry (served from memory).", labels=LABELS
        )
        misses = CounterMetricFamily(
            "hifi_lookup_misses", "Reads of a key the cache holds no entry for.", labels=LABELS
        )
        stale = CounterMetricFamily(
            "hifi_lookup_stale_served",
            "Reads that returned a value loaded more than refresh_after_s ago (a reload is due"
            " or failing): rises while the source is down.",
            labels=LABELS,
        )
        oldest = GaugeMetricFamily(
            "hifi_lookup_oldest_value_age_seconds",
            "Time since the oldest value held was last loaded from the source.",
            labels=LABELS,
        )
        since_full = GaugeMetricFamily(
            "hifi_lookup_last_full_refresh_age_seconds",
            "Time since the last successful load of every entry (or since the snapshot loaded"
            " at start was written).",
            labels=LABELS,
        )
        for labels, reading in list(self._readers.items()):
            now = reading()
            values = list(labels)
            entries.add_metric(values, now.entries)
            hits.add_metric(values, now.hits)
            misses.add_metric(values, now.misses)
            stale.add_metric(values, now.stale_served)
            if now.oldest_value_age_s is not None:
                oldest.add_metric(values, now.oldest_value_age_s)
            if now.last_full_refresh_age_s is not None:
                since_full.add_metric(values, now.last_full_refresh_age_s)
        yield from (entries, hits, misses, stale, oldest, since_full)


CACHES = _Caches()
REGISTRY.register(CACHES)
