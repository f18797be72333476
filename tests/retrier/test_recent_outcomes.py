"""Re-offers and expiries of the last minute, for the status page and the dashboard."""

from __future__ import annotations

from retrier.status import RecentOutcomes


def test_the_rate_covers_the_last_minute_and_the_totals_everything() -> None:
    outcomes = RecentOutcomes()
    outcomes.note("d", 1_000, reoffered=30, expired=0)
    outcomes.note("d", 50_000, reoffered=30, expired=2)
    outcomes.note("other", 50_000, reoffered=5, expired=5)
    assert outcomes.of("d", 55_000) == {
        "reoffered_per_s": 1.0,
        "expired_last_minute": 2,
        "reoffered_since_start": 60,
        "expired_since_start": 2,
    }
    later = outcomes.of("d", 70_000)  # the first produce left the window
    assert (later["reoffered_per_s"], later["reoffered_since_start"]) == (0.5, 60)
    assert outcomes.of("d", 200_000)["reoffered_per_s"] == 0.0
    assert outcomes.of("never", 0)["reoffered_since_start"] == 0
