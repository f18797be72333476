"""Durations printed for people: the units that are not zero, never a fraction of a day."""

from __future__ import annotations

import pytest

from hifi.durations import for_people, for_people_ms


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (86_400 + 600, "1 d 10 min"),  # max_retry_age_s = 600 s, plus a day
        (7 * 86_400, "7 d"),
        (2 * 3600 + 30, "2 h 30 s"),
        (90, "1 min 30 s"),
        (30, "30 s"),
        (1.5, "1.5 s"),
        (0.25, "250 ms"),
        (0, "0 s"),
        (float("inf"), "forever"),
    ],
)
def test_for_people(seconds: float, shown: str) -> None:
    assert for_people(seconds) == shown


def test_milliseconds_and_forever() -> None:
    """Kafka's retention.ms: -1 keeps records forever."""
    assert for_people_ms(87_000_000) == "1 d 10 min"
    assert for_people_ms(-1) == "forever"


def test_a_negative_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        for_people(-1)
