"""The chaos run's audit check: the auditor's minutes against the run's own count by id."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from chaos.audit import MINUTE_MS, Expected, check, expected_minutes

M0 = 1_790_000_040_000 - 1_790_000_040_000 % MINUTE_MS  # a minute start
M1, M2 = M0 + MINUTE_MS, M0 + 2 * MINUTE_MS


def row(minute_ms: int, **figures: Any) -> dict[str, Any]:
    """A `/tables` row of a final minute."""
    base = {"entered": 0, "delivered": 0, "dead_lettered": 0, "in_retry": 0, "missing": 0}
    iso = datetime.fromtimestamp(minute_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:00Z")
    return {"minute": iso, "final": True, **base, **figures}


def hh_mm(minute_ms: int) -> str:
    return datetime.fromtimestamp(minute_ms / 1000, UTC).strftime("%H:%M")


def test_expected_minutes_count_by_id_in_the_minute_of_each() -> None:
    """Each key counts in its own minute; a dead letter that was also delivered counts as delivered."""
    produced = {"a": M0 + 5, "b": M0 + 59_999, "c": M1, "t/0/7": M1 + 1}
    minutes = expected_minutes(
        produced, ["a", "a", "b", "x"], {"b": "http_4xx", "t/0/7": "malformed"}
    )
    assert minutes == {M0: Expected(2, 2, 0), M1: Expected(2, 0, 1)}


def test_matching_final_minutes_are_ok() -> None:
    """Final minutes whose figures equal the run's, nothing missing or in retry: the account is ok."""
    expected = {M0: Expected(3, 2, 1)}
    account = check([row(M0, entered=3, delivered=2, dead_lettered=1)], expected)
    assert account.ok
    assert (account.minutes, account.entered, account.delivered, account.dead_lettered) == (
        1,
        3,
        2,
        1,
    )


def test_every_difference_is_a_mismatch() -> None:
    """A wrong figure, a minute not final, and a minute on one side only are each named."""
    expected = {M0: Expected(3, 3, 0), M1: Expected(1, 1, 0), M2 + MINUTE_MS: Expected(1, 1, 0)}
    rows = [
        row(M0, entered=3, delivered=2, missing=1),
        row(M1, entered=1, delivered=1, final=False),
        row(M2, entered=1, delivered=1),
    ]
    account = check(rows, expected)
    assert not account.ok
    assert account.mismatches == (
        f"{hh_mm(M0)} delivered 2 != 3",
        f"{hh_mm(M0)} missing 1 != 0",
        f"{hh_mm(M1)} not final",
        f"{hh_mm(M2)} only in the auditor",
        f"{hh_mm(M2 + MINUTE_MS)} only in the run",
    )
    assert (account.provisional, account.missing) == (1, 1)
