"""A day's availability accounts for each of its 1440 minutes once, whatever clock it is given."""

from __future__ import annotations

from datetime import UTC, datetime

from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.tables import day_availability

DAY = datetime(2026, 3, 4, tzinfo=UTC)
DAY_MS = int(DAY.timestamp() * 1000)


def test_a_horizon_reckoned_from_a_clock_splits_the_day_without_losing_a_minute() -> None:
    """`auditor report --archive` reckons the horizon from its clock (not on a minute): final,
    pending and to-come minutes still add up to the day."""
    now_ms = DAY_MS + 753 * MINUTE_MS + 31_500
    final_before_ms = now_ms - 1_000 - MINUTE_MS  # settle_s 1
    day = day_availability([], DAY.date(), final_before_ms=final_before_ms, now_ms=now_ms)
    assert (day["minutes"], day["pending_minutes"], day["to_come_minutes"]) == (753, 1, 686)
    assert day["minutes"] + day["pending_minutes"] + day["to_come_minutes"] == 1440
