"""The accounts of one destination: set differences by origin, settling, lag, availability, snapshot."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import msgspec
import pytest

from config.destination import Accounting
from hifi.accounting.buckets import MINUTE_MS, Problem
from hifi.accounting.ledger import Ledger
from hifi.accounting.percentiles import nearest_rank, nearest_rank_counted
from hifi.audit import FORMAT_MAJOR, FORMAT_MINOR, Fact, Slice
from hifi.vocabulary import Outcome, Reason

T0 = 1_790_000_040_000 - 1_790_000_040_000 % MINUTE_MS  # a minute start
TP = ("events", 0)


def fact(
    outcome: Outcome,
    offsets: list[int],
    *,
    at_ms: int,
    event_ms: int = T0 + 1000,
    reason: Reason | None = None,
    fact_id: str | None = None,
) -> Fact:
    return Fact(
        FORMAT_MAJOR,
        FORMAT_MINOR,
        fact_id or uuid.uuid4().hex,
        "d",
        "test",
        str(outcome),
        None if reason is None else str(reason),
        None,
        at_ms,
        [
            Slice(
                TP[0],
                TP[1],
                offsets,
                [f"id-{o}" for o in offsets],
                [event_ms] * len(offsets),
                [event_ms + 5] * len(offsets),
            )
        ],
    )


def ledger(**settings: float) -> Ledger:
    return Ledger("d", Accounting(settle_s=settings.pop("settle_s", 60.0), **settings))  # type: ignore[arg-type]


def test_counts_are_set_differences_by_origin() -> None:
    book = ledger()
    book.enter(T0, TP, range(10))
    book.apply(fact(Outcome.DELIVERED, [0, 1, 2, 3, 4, 5, 6], at_ms=T0 + 1500))
    book.apply(fact(Outcome.DEAD_LETTERED, [7], at_ms=T0 + 1500, reason=Reason.HTTP_4XX))
    book.apply(fact(Outcome.HANDED_OFF, [8], at_ms=T0 + 1500))
    counts = book.tally(book.buckets[T0])
    assert (counts.entered, counts.delivered, counts.dead_lettered) == (10, 7, 1)
    assert counts.dead_lettered_by_reason == {"http_4xx": 1}
    assert (counts.in_retry, counts.missing) == (1, 1)


def test_a_later_2xx_wins_over_a_dead_letter_and_repeated_facts_count_once() -> None:
    book = ledger()
    book.enter(T0, TP, range(3))
    book.apply(fact(Outcome.DEAD_LETTERED, [0, 1], at_ms=T0 + 2000, reason=Reason.EXPIRED))
    same = fact(Outcome.DELIVERED, [1], at_ms=T0 + 3000, fact_id="f1")
    book.apply(same)
    book.apply(same)  # written twice by a producer retry: one fact
    book.apply(fact(Outcome.DELIVERED, [2], at_ms=T0 + 3000))
    book.apply(fact(Outcome.DELIVERED, [2], at_ms=T0 + 4000))  # delivered again: a duplicate
    counts = book.tally(book.buckets[T0])
    assert counts.delivered == 2
    assert counts.dead_lettered_by_reason == {"expired": 1}
    assert book.repeated_facts == 1
    assert book.buckets[T0].duplicates == 1


def test_fact_ids_are_kept_until_the_minutes_a_repeat_could_change_are_final() -> None:
    book = ledger(settle_s=60.0)
    book.enter(T0, TP, range(3))
    first = fact(Outcome.DELIVERED, [0, 1], at_ms=T0 + 3000, fact_id="f1")
    book.apply(first)
    kept_ms = book.facts_kept_ms()
    assert kept_ms == 60_000 + MINUTE_MS + 2 * MINUTE_MS  # settle_s, the minute, a margin
    bucket = book.buckets[T0]
    book.advance(T0 + 3000 + kept_ms)
    assert bucket.final
    assert "f1" in book.seen_facts
    book.advance(T0 + 3000 + kept_ms + 1)
    assert book.seen_facts == {}  # not half an hour of ids: a tenant destination's grew by GBs
    counts = book.tally(bucket)
    assert book.apply(first) == []  # repeated once its minute is final: no count changes
    assert book.tally(bucket) == counts
    assert (counts.delivered, counts.missing, bucket.duplicates) == (2, 1, 0)


def test_a_bucket_settles_on_the_progress_clock_and_keeps_only_waiting_events() -> None:
    book = ledger(settle_s=60.0)
    book.enter(T0, TP, range(100))
    book.apply(fact(Outcome.DELIVERED, list(range(90)), at_ms=T0 + 1200))
    book.apply(fact(Outcome.HANDED_OFF, list(range(90, 99)), at_ms=T0 + 1200))
    assert book.advance(T0 + MINUTE_MS + 59_999) == []
    (settled,) = book.advance(T0 + MINUTE_MS + 60_000)
    bucket = settled.bucket
    assert bucket.final
    assert bucket.entered == {}
    assert book.waiting_events() == 10  # 9 in retry, 1 missing: only these are kept one by one
    assert settled.alarm
    assert settled.loss_ratio == 0.01
    assert (bucket.up, bucket.down_reason) == (False, "loss")
    # the retrier resolves them later: a final minute's in_retry and delivered still change
    (change,) = book.apply(fact(Outcome.DELIVERED, list(range(90, 99)), at_ms=T0 + 600_000))
    counts = book.tally(bucket)
    assert (counts.delivered, counts.in_retry, counts.missing) == (99, 0, 1)
    assert change.delivered == 9
    assert book.waiting_events() == 1


def test_lag_percentiles_are_exact_nearest_rank_over_first_deliveries() -> None:
    assert nearest_rank([10, 20, 30, 40], 50) == 20
    assert nearest_rank(list(range(1, 101)), 95) == 95
    assert nearest_rank([], 99) is None
    values = [7, 3, 3, 9, 1, 3, 12, 7, 5, 5, 5, 2]
    counted = sorted(Counter(values).items())
    for pct in (1, 25, 50, 90, 95, 99, 100):
        assert nearest_rank_counted(counted, pct) == nearest_rank(sorted(values), pct)
    book = ledger()
    book.enter(T0, TP, range(100))
    for offset in range(100):
        book.apply(fact(Outcome.DELIVERED, [offset], at_ms=T0 + 1000 + offset + 1))
    book.apply(fact(Outcome.DELIVERED, [99], at_ms=T0 + 900_000))  # a duplicate adds no lag
    lags = book.lags(book.buckets[T0])
    assert (lags.p50_ms, lags.p95_ms, lags.p99_ms) == (50, 95, 99)
    assert lags.lag_in_p95_ms == 5  # taken in 5 ms after the event time


def test_a_minute_is_down_for_lag_above_the_sla_or_with_too_many_late_events() -> None:
    book = ledger(lag_sla_s=1.0)
    book.enter(T0, TP, range(10))
    book.apply(fact(Outcome.DELIVERED, list(range(10)), at_ms=T0 + 1000 + 2500))
    later = T0 + MINUTE_MS
    book.enter(later, TP, range(10, 30))
    book.apply(
        fact(Outcome.DELIVERED, list(range(10, 28)), at_ms=later + 1100, event_ms=later + 1000)
    )
    book.apply(fact(Outcome.HANDED_OFF, [28, 29], at_ms=later + 1100, event_ms=later + 1000))
    first, second = book.advance(later + 10 * MINUTE_MS)
    assert (first.bucket.up, first.bucket.down_reason) == (False, "lag")
    assert (second.bucket.up, second.bucket.down_reason) == (False, "lag")  # 2 of 20 waiting
    assert book.availability(later + 10 * MINUTE_MS) == 1 - 2 / 10  # empty minutes are up


def test_odd_event_times_are_bucketed_by_kafka_time() -> None:
    book = ledger(settle_s=60.0)
    assert book.bucket_for_entry(T0 + 3_600_000, T0) == (T0, Problem.TIME_FUTURE)
    book.enter(T0, TP, [0])
    book.advance(T0 + 5 * MINUTE_MS)
    minute, problem = book.bucket_for_entry(T0 - 365 * 86_400_000, T0 + 5 * MINUTE_MS)
    assert problem is Problem.TIME_PAST
    assert minute >= book.closed_before_ms


def test_snapshot_round_trip_gives_the_same_tables() -> None:
    book = ledger()
    book.enter(T0, TP, range(50))
    book.enter(T0 + MINUTE_MS, TP, range(50, 80))
    book.apply(fact(Outcome.DELIVERED, list(range(40)), at_ms=T0 + 1300))
    book.apply(fact(Outcome.HANDED_OFF, [45], at_ms=T0 + 1300))
    book.advance(T0 + MINUTE_MS + 61_000)
    data = msgspec.msgpack.encode(book.snapshot())
    again = ledger()
    again.restore(msgspec.msgpack.decode(data))
    for minute in (T0, T0 + MINUTE_MS):
        assert again.tally(again.buckets[minute]) == book.tally(book.buckets[minute])
        assert again.lags(again.buckets[minute]) == book.lags(book.buckets[minute])
    assert again.apply(fact(Outcome.DELIVERED, [45], at_ms=T0 + 999_000))[0].delivered == 1


def test_a_million_waiting_events_cost_little_memory() -> None:
    book = ledger()
    for minute in range(5):
        start = minute * 200_000
        book.enter(T0 + minute * MINUTE_MS, TP, range(start, start + 200_000))
    size = sum(
        len(bitmap.serialize())
        for bucket in book.buckets.values()
        for bitmap in bucket.entered.values()
    )
    assert book.waiting_events() == 1_000_000
    assert size < 100_000  # a few hundred bytes per 65,536 contiguous offsets


def test_nothing_settles_before_the_first_assignment() -> None:
    """A fresh auditor on a backlog older than settle_s: its first commits come before it owns a
    partition, and must not close the minutes it has yet to read."""
    from aiokafka import TopicPartition

    from auditor.progress import ProgressClock

    now = T0 + 3_600_000
    clock = ProgressClock(lambda tp: None, lambda: now)
    assert clock.at(["events", "hifi.audit"]) == 0
    clock.owned({TopicPartition("events", 0), TopicPartition("hifi.audit", 0)})
    clock.read(TopicPartition("events", 0), 10, T0 + 5000)
    clock.read(TopicPartition("hifi.audit", 0), 3, T0 + 9000)
    assert clock.at(["events", "hifi.audit"]) == T0 + 5000
    assert clock.at(["missing-topic", "hifi.audit"]) == T0 + 9000


def test_the_column_path_for_deliveries_notes_what_the_event_by_event_path_notes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """First deliveries of one minute, on time, go through `_note_on_time_minute`; every other
    slice (two minutes, duplicates, late, unknown taken-in time) through the loop. Both give
    the same lags, on-time counts, duplicates and histograms."""
    rng = random.Random(7)
    facts = []
    for i in range(40):
        offsets = list(
            range((i - 1 if i % 6 == 5 else i) * 50, (i - 1 if i % 6 == 5 else i) * 50 + 50)
        )
        base = T0 + rng.choice([0, MINUTE_MS, 2 * MINUTE_MS])
        times = [base + rng.randrange(0, 70_000 if i % 5 == 0 else 60_000) for _ in offsets]
        taken = [0 if i % 7 == 0 else t + rng.randrange(0, 300) for t in times]
        at_ms = max(times) + rng.choice([50, 900, 2_000, 400_000])
        facts.append(
            Fact(
                FORMAT_MAJOR,
                FORMAT_MINOR,
                uuid.uuid4().hex,
                "d",
                "test",
                "delivered",
                None,
                200,
                at_ms,
                [Slice(TP[0], TP[1], offsets, [f"i{o}" for o in offsets], times, taken)],
            )
        )

    def apply_all(book: Ledger) -> list[tuple[object, ...]]:
        for one in facts:
            book.apply(one)
        return [
            (
                m,
                b.on_time,
                b.duplicates,
                sorted(b.lags_ms.items()),
                list(b.lag_in.counts),
                list(b.process.counts),
            )
            for m, b in sorted(book.buckets.items())
        ]

    fast = apply_all(ledger(settle_s=120.0))
    with monkeypatch.context() as patched:
        patched.setattr(Ledger, "_note_on_time_minute", lambda *args: False)
        slow = apply_all(ledger(settle_s=120.0))
    assert fast == slow
    assert sum(int(str(row[1])) for row in fast) > 0  # some deliveries were on time


def test_a_final_minute_keeps_its_lags_packed_and_no_histogram_bins() -> None:
    book = ledger()
    for minute in range(60):
        start_ms, first = T0 + minute * MINUTE_MS, minute * 100
        book.enter(start_ms, TP, range(first, first + 100))
        for i in range(100):
            at_ms = start_ms + 1000 + 10 * i
            book.apply(fact(Outcome.DELIVERED, [first + i], at_ms=at_ms, event_ms=start_ms + 1000))
    judged = book.lags(book.buckets[T0])
    assert book.advance(T0 + 61 * MINUTE_MS + 61_000)
    bucket = book.buckets[T0]
    assert bucket.final
    assert book.lags(bucket) == judged
    assert judged.p95_ms == 940
    assert len(bucket.lag_in.counts) == len(bucket.process.counts) == 0  # packed in the spread
    with pytest.raises(IndexError):
        bucket.process.add(5)  # nothing may count into a final minute's distributions
    data = msgspec.msgpack.encode(book.snapshot())
    assert len(data) < 60 * 2_000  # what a final minute costs: its counts and packed lags
    again = ledger()
    again.restore(msgspec.msgpack.decode(data))
    assert again.lags(again.buckets[T0]) == judged
    assert len(again.buckets[T0].lag_in.counts) == 0


def test_a_final_minute_from_an_older_snapshot_lets_its_zero_histograms_go() -> None:
    book = ledger()
    book.enter(T0, TP, range(10))
    book.apply(fact(Outcome.DELIVERED, list(range(10)), at_ms=T0 + 1300))
    book.advance(T0 + MINUTE_MS + 61_000)
    state = msgspec.msgpack.decode(msgspec.msgpack.encode(book.snapshot()))
    (raw,) = state["buckets"]
    raw["lag_in"] = raw["process"] = bytes(8 * 924)  # as snapshots wrote them before
    again = ledger()
    again.restore(state)
    bucket = again.buckets[T0]
    assert bucket.final
    assert len(bucket.lag_in.counts) == len(bucket.process.counts) == 0
    assert again.lags(bucket) == book.lags(book.buckets[T0])
