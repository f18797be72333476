"""The soak's ledger: accepted events by source and sequence against their deliveries."""

from __future__ import annotations

from devstack.destination import Delivery
from soak.ledger import Ledger

T0 = 1_700_000_040_000  # a minute's start


def test_missing_duplicates_and_foreign_ids_are_counted_whatever_the_order() -> None:
    ledger = Ledger(T0, {"k": "plain", "t": "tenants"})
    # a delivery may come before its producer's acknowledgement is noted
    ledger.on_delivery([Delivery("k-3", T0 + 40, T0)])
    for seq in range(5):
        ledger.accepted("k", seq, T0)
    ledger.accepted("t", 70_000, T0 + 61_000)  # past the first growth of the arrays
    ledger.on_delivery(
        [Delivery("k-0", T0 + 10, T0), Delivery("k-0", T0 + 5_000, T0), Delivery("x-1", 0, 0)]
    )
    assert ledger.accepted_count() == 6
    assert ledger.delivered_count() == 2
    assert ledger.duplicates() == 1
    assert ledger.missing() == {"k": [1, 2, 4], "t": [70_000]}
    assert ledger.foreign == 1
    assert ledger.repeats_by_s == {(T0 + 5_000) // 1000: 1}
    assert ledger.first_deliveries == 2  # k-3 before its acknowledgement, and k-0 once


def test_lags_are_of_first_deliveries_in_their_event_minute() -> None:
    ledger = Ledger(T0, {"k": "plain"})
    ledger.on_delivery([Delivery(f"k-{seq}", T0 + 1_000 + seq, T0 + 1_000) for seq in range(100)])
    ledger.on_delivery([Delivery("k-0", T0 + 90_000, T0 + 1_000)])  # a repeat: no lag of its own
    lags = ledger.lags()
    assert list(lags) == [T0]
    assert (lags[T0].events, lags[T0].p50_ms, lags[T0].p95_ms, lags[T0].p99_ms) == (100, 49, 94, 98)


def test_expected_minutes_split_delivered_and_dead_lettered_by_destination() -> None:
    ledger = Ledger(T0, {"k": "plain", "t": "tenants"})
    for seq in range(4):
        ledger.accepted("k", seq, T0 + seq * 30_000)  # two minutes
    ledger.accepted("t", 0, T0)
    ledger.on_delivery([Delivery("k-0", T0, T0), Delivery("k-2", T0, T0 + 60_000)])
    expected = ledger.expected_minutes({"plain": {"k-1", "k-0"}, "tenants": set()})
    plain = {
        minute: (e.entered, e.delivered, e.dead_lettered) for minute, e in expected["plain"].items()
    }
    assert plain == {T0: (2, 1, 1), T0 + 60_000: (2, 1, 0)}  # k-0 delivered: not dead only
    assert {m: e.entered for m, e in expected["tenants"].items()} == {T0: 1}


def test_an_event_written_twice_to_its_topic_counts_twice_as_the_auditors_count_records() -> None:
    # ingest answered 503 for k-1's batch after the broker wrote it: resent, it is there twice
    ledger = Ledger(T0, {"k": "plain"})
    for seq in range(3):
        ledger.accepted("k", seq, T0)
    ledger.on_delivery([Delivery(f"k-{seq}", T0 + 10, T0) for seq in (0, 1, 1)])
    ledger.written(["k-0", "k-1", "k-2", "k-1", "x-9", "k-nine"])
    expected = ledger.expected_minutes({"plain": {"k-2"}})["plain"][T0]
    assert (expected.entered, expected.delivered, expected.dead_lettered) == (4, 3, 1)
    assert ledger.written_again() == 1
    assert ledger.duplicates() == 1


def test_before_the_topics_are_read_each_accepted_event_counts_once() -> None:
    ledger = Ledger(T0, {"k": "plain"})
    ledger.accepted("k", 0, T0)
    expected = ledger.expected_minutes({})["plain"][T0]
    assert (expected.entered, expected.delivered) == (1, 0)
    assert ledger.written_again() == 0
