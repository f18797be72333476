"""The lag histogram's fast path exposes exactly what prometheus_client's `Histogram` would."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from connector.metrics import PerEventHistogram
from hifi.vocabulary import LAG_BUCKETS_S

NOW_MS = 1_795_000_000_000.0


def _exposition(registry: CollectorRegistry) -> list[str]:
    """Text exposition without `_created` lines (they hold the creation time)."""
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


def test_observe_ages_matches_one_histogram_observe_per_event() -> None:
    rng = random.Random(7)
    ours_registry, reference_registry = CollectorRegistry(), CollectorRegistry()
    ours = PerEventHistogram(
        "lag_seconds", "Lag.", ["dest"], buckets=LAG_BUCKETS_S, registry=ours_registry
    )
    reference = Histogram(
        "lag_seconds", "Lag.", ["dest"], buckets=LAG_BUCKETS_S, registry=reference_registry
    )
    batches = [
        # ages from the future (clock skew) to two days, and exactly on bucket bounds
        [NOW_MS - rng.choice([-500, 0, 3, 5, 7, 100, 999, 1000, 4e4, 2e8]) for _ in range(40)],
        [NOW_MS - rng.expovariate(1 / 800) for _ in range(500)],
        [NOW_MS - bound * 1000 for bound in LAG_BUCKETS_S],
        [],
    ]
    for times_ms in batches:
        ours.labels("d").observe_ages(NOW_MS, times_ms)
        for t in times_ms:
            reference.labels("d").observe(max(0.0, NOW_MS - t) / 1000)
    ours_lines, reference_lines = _exposition(ours_registry), _exposition(reference_registry)
    assert [line for line in ours_lines if "_sum" not in line] == [
        line for line in reference_lines if "_sum" not in line
    ]
    (ours_sum,) = [float(line.split()[-1]) for line in ours_lines if "_sum" in line]
    (reference_sum,) = [float(line.split()[-1]) for line in reference_lines if "_sum" in line]
    assert abs(ours_sum - reference_sum) < 1e-6 * reference_sum
    (first_bucket,) = [line for line in ours_lines if 'le="0.005"' in line]
    assert float(first_bucket.split()[-1]) > len(LAG_BUCKETS_S)  # future and zero ages count
