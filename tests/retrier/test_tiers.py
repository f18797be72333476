"""Pure retrier decisions: tier routing, due times, expiry, header rewrites and the dlq helpers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hifi.cli import parse_time as parse_since
from hifi.errors import ConfigError
from retrier import headers
from retrier.dlq import format_age
from retrier.record import expiry_reason
from retrier.tiers import (
    Expire,
    ReOffer,
    RetryState,
    ToTier,
    Wait,
    decide_due,
    route,
    tier_of,
    tier_topic,
)

TIERS_S = [30.0, 120.0, 600.0]
DAY_S = 86400.0
T0_MS = 1_700_000_000_000


def _handoff(attempt: int, *, handoff_ms: int = T0_MS, first_ms: int = T0_MS) -> RetryState:
    return RetryState(attempt=attempt, first_failure_ms=first_ms, handoff_ms=handoff_ms)


@pytest.mark.parametrize(("attempt", "tier", "delay_s"), [(1, 0, 30), (2, 1, 120), (3, 2, 600)])
def test_kth_handoff_waits_in_tier_k_minus_1(attempt: int, tier: int, delay_s: int) -> None:
    """The k-th hand-off goes to tier k-1 and is due that tier's delay after its hand-off."""
    handoff_ms = T0_MS + 5_000
    decision = route(
        _handoff(attempt, handoff_ms=handoff_ms), tiers_s=TIERS_S, max_age_s=DAY_S, now_ms=T0_MS
    )
    assert decision == ToTier(tier, handoff_ms + delay_s * 1000)


def test_due_time_counts_from_handoff_not_from_routing() -> None:
    """An event routed late (retrier was down) is due relative to its hand-off, possibly already."""
    decision = route(_handoff(1), tiers_s=TIERS_S, max_age_s=DAY_S, now_ms=T0_MS + 45_000)
    assert decision == ToTier(0, T0_MS + 30_000)


def test_after_the_last_tier_the_event_expires() -> None:
    """A hand-off beyond the number of tiers expires instead of waiting."""
    decision = route(_handoff(4), tiers_s=TIERS_S, max_age_s=DAY_S, now_ms=T0_MS)
    assert isinstance(decision, Expire)
    assert "3 retry tiers" in decision.why


def test_an_event_older_than_max_age_expires_at_routing() -> None:
    """More than max_retry_age_s since the first failure expires even with tiers left."""
    first_ms = T0_MS - int(DAY_S * 1000) - 1
    decision = route(_handoff(1, first_ms=first_ms), tiers_s=TIERS_S, max_age_s=DAY_S, now_ms=T0_MS)
    assert isinstance(decision, Expire)
    assert "max_retry_age_s" in decision.why


def test_exactly_max_age_is_not_yet_expired() -> None:
    """The age limit is exclusive: an event exactly max_retry_age_s old still gets its tier."""
    first_ms = T0_MS - int(DAY_S * 1000)
    decision = route(_handoff(1, first_ms=first_ms), tiers_s=TIERS_S, max_age_s=DAY_S, now_ms=T0_MS)
    assert isinstance(decision, ToTier)


def test_release_waits_until_due_then_reoffers_with_lateness() -> None:
    """Before its due time a record waits; at or after it, it is re-offered and its lateness known."""
    due_ms = T0_MS + 30_000
    assert decide_due(due_ms, first_failure_ms=T0_MS, max_age_s=DAY_S, now_ms=due_ms - 1) == Wait(
        due_ms
    )
    assert decide_due(due_ms, first_failure_ms=T0_MS, max_age_s=DAY_S, now_ms=due_ms) == ReOffer(0)
    assert decide_due(
        due_ms, first_failure_ms=T0_MS, max_age_s=DAY_S, now_ms=due_ms + 250
    ) == ReOffer(250)


def test_release_expires_an_event_that_aged_out_while_waiting() -> None:
    """Max age is checked again at release: a due event past it goes to the DLQ."""
    decision = decide_due(T0_MS, first_failure_ms=T0_MS - 10_000, max_age_s=5.0, now_ms=T0_MS)
    assert isinstance(decision, Expire)


def test_tier_topic_names_round_trip() -> None:
    """Tier topics are NAME.retry_tierK and are recognised only for their own destination."""
    assert tier_topic("tv", 2) == "tv.retry_tier2"
    assert tier_of("tv", "tv.retry_tier2") == 2
    assert tier_of("tv", "tv.retry_tier12") == 12
    assert tier_of("tv", "tvx.retry_tier2") is None
    assert tier_of("tv", "tv.retry_in") is None
    assert tier_of("tv", "tv.retry_tier02") is None


HANDOFF_HEADERS = [
    ("trace", b"abc"),
    ("hifi-dest", b"tv"),
    ("hifi-attempt", b"2"),
    ("hifi-first-failure-ms", b"100"),
    ("hifi-handoff-ms", b"200"),
    ("hifi-status", b"503"),
    ("hifi-error", b"HTTP 503"),
    ("hifi-origin", b"events/1/42"),
    ("hifi-history", b"[]"),
]


def test_header_rewrites_along_the_way() -> None:
    """Tier records gain one due time; retry_out and DLQ records keep every other header."""
    tiered = headers.to_tier([*HANDOFF_HEADERS, ("hifi-due-ms", b"1")], due_ms=5000)
    assert tiered == [*HANDOFF_HEADERS, ("hifi-due-ms", b"5000")]
    assert headers.to_retry_out(tiered) == HANDOFF_HEADERS
    reason = expiry_reason(dict(tiered).get("hifi-cause"))
    dead = headers.to_dlq([*tiered, ("hifi-reason", b"old")], reason=reason)
    assert dead == [*HANDOFF_HEADERS, ("hifi-reason", b"expired")]


def test_the_cause_of_the_failures_is_the_dead_letters_reason() -> None:
    """A hand-off whose cause the connector named (`hifi-cause`) dies with that reason, not
    `expired`; a cause outside the vocabulary falls back to `expired`."""
    caused = [*HANDOFF_HEADERS, ("hifi-cause", b"unknown_tenant")]
    reason = expiry_reason(dict(caused).get("hifi-cause"))
    assert reason == "unknown_tenant"
    assert headers.to_dlq(caused, reason=reason)[-1] == ("hifi-reason", b"unknown_tenant")
    assert expiry_reason(b"gremlins") == "expired"
    assert dict(headers.replayed(caused)).get("hifi-cause") is None  # a replay starts over


def test_replayed_dead_letter_starts_over() -> None:
    """A replayed dead letter has attempt 0, no first failure or reason, and keeps origin, history, own headers."""
    replayed = dict(headers.replayed([*HANDOFF_HEADERS, ("hifi-reason", b"expired")]))
    assert replayed == {
        "trace": b"abc",
        "hifi-dest": b"tv",
        "hifi-origin": b"events/1/42",
        "hifi-history": b"[]",
        "hifi-attempt": b"0",
    }


def test_since_accepts_durations_and_iso_timestamps() -> None:
    """--since is a duration ago (30m, 2h, 1h30m, 1d) or an ISO timestamp, UTC unless stated."""
    now_ms = T0_MS
    assert parse_since("30m", now_ms=now_ms) == now_ms - 1_800_000
    assert parse_since("1h30m", now_ms=now_ms) == now_ms - 5_400_000
    assert parse_since("2d", now_ms=now_ms) == now_ms - 2 * 86_400_000
    expected = int(datetime(2026, 1, 31, 8, 0, tzinfo=UTC).timestamp() * 1000)
    assert parse_since("2026-01-31T08:00:00Z", now_ms=now_ms) == expected
    assert parse_since("2026-01-31T08:00:00", now_ms=now_ms) == expected
    assert parse_since("2026-01-31T09:00:00+01:00", now_ms=now_ms) == expected
    for bad in ("yesterday", "2x", "-5m", ""):
        with pytest.raises(ConfigError, match="--since"):
            parse_since(bad, now_ms=now_ms)


def test_ages_are_short() -> None:
    """Ages print as 42s, 3m12s, 2h05m, 4d03h."""
    assert format_age(42_000) == "42s"
    assert format_age(192_000) == "3m12s"
    assert format_age(7_500_000) == "2h05m"
    assert format_age(356_400_000) == "4d03h"
    assert format_age(-5) == "0s"
