"""Late is not lost: an event without an outcome that its source partition still holds (at or
after the delivering group's committed offset, and the log's start) is waiting, not missing; it
goes missing only when the group commits past it without an outcome, or retention removes it."""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from auditor.holdings import CLOCK_SKEW_MS, Holdings, Sample
from auditor.lead import recounted
from auditor.missing import missing_origins
from hifi.accounting.buckets import MINUTE_MS
from hifi.vocabulary import Outcome
from tests.auditor.test_ledger import T0, TP, fact, ledger

SETTLED_MS = T0 + MINUTE_MS + 61_000  # T0 is final (settle_s 60)


def test_events_behind_an_open_breaker_are_waiting_not_missing() -> None:
    """Ten events, three delivered before the minute is final, seven still in the partition
    (the group committed up to 3): the minute is late, nothing is missing or alarmed."""
    book = ledger()
    book.enter(T0, TP, range(10))
    book.apply(fact(Outcome.DELIVERED, [0, 1, 2], at_ms=T0 + 1500))
    book.hold({TP: 3})
    (settled,) = book.advance(SETTLED_MS)
    counts = settled.bucket.counts
    assert counts is not None
    assert (counts.delivered, counts.waiting, counts.missing) == (3, 7, 0)
    assert not settled.alarm
    assert (settled.bucket.up, settled.bucket.down_reason) == (False, "lag")
    assert missing_origins(settled.bucket, book.held_from) == {}
    # the breaker closes: delivered late, the minute revised, still nothing missing
    book.apply(fact(Outcome.DELIVERED, list(range(3, 10)), at_ms=SETTLED_MS + 30_000))
    assert (counts.delivered, counts.waiting, counts.missing) == (10, 0, 0)
    assert book.hold({TP: 10}) == ([], [])


def test_the_group_committing_past_an_event_without_an_outcome_is_a_loss() -> None:
    """Waiting events the group then commits past with no outcome are missing from that moment;
    the minute is named as one whose missing rose."""
    book = ledger()
    book.enter(T0, TP, range(10))
    book.apply(fact(Outcome.HANDED_OFF, [0], at_ms=T0 + 1500))  # in retry: never missing
    book.hold({TP: 0})
    (settled,) = book.advance(SETTLED_MS)
    counts = settled.bucket.counts
    assert counts is not None
    assert (counts.in_retry, counts.waiting, counts.missing) == (1, 9, 0)
    book.apply(fact(Outcome.DELIVERED, [1, 2], at_ms=SETTLED_MS + 1_000))
    assert book.hold({TP: 6}) == ([T0], [T0])  # 3, 4, 5: committed past, no outcome
    assert (counts.delivered, counts.in_retry, counts.waiting, counts.missing) == (2, 1, 4, 3)
    assert missing_origins(settled.bucket, book.held_from) == {TP: [3, 4, 5]}
    assert book.hold({TP: 6}) == ([], [])  # nothing moved since


def test_retention_removing_a_waiting_event_is_a_loss() -> None:
    """The log's start passing events that waited (the connector stopped for longer than the
    topic's retention) loses them: held from the start, not from the committed offset."""
    book = ledger()
    book.enter(T0, TP, range(4))
    book.hold({TP: 0})
    (settled,) = book.advance(SETTLED_MS)
    assert book.hold({TP: 2}) == ([T0], [T0])
    counts = settled.bucket.counts
    assert counts is not None
    assert (counts.waiting, counts.missing) == (2, 2)


def test_without_holdings_every_event_without_an_outcome_is_missing() -> None:
    """A ledger told nothing of the partitions (None) counts as before: no outcome, missing."""
    book = ledger()
    book.enter(T0, TP, range(5))
    (settled,) = book.advance(SETTLED_MS)
    counts = settled.bucket.counts
    assert counts is not None
    assert (counts.waiting, counts.missing) == (0, 5)
    assert settled.alarm


def test_provisional_minutes_count_waiting_too() -> None:
    book = ledger()
    book.enter(T0, TP, range(6))
    book.apply(fact(Outcome.DELIVERED, [0], at_ms=T0 + 1500))
    book.hold({TP: 4})
    counts = book.tally(book.buckets[T0])
    assert (counts.delivered, counts.waiting, counts.missing) == (1, 2, 3)


def test_a_sample_counts_once_the_audit_topic_is_read_past_it() -> None:
    """Facts of records below a committed offset were written before the commit: a sample is
    used only once the auditor's progress is past its time (and the writers' clock skew)."""
    holdings = Holdings()
    tp = TopicPartition("events", 0)
    assert holdings.held_from("d", tp, progress_ms=10**13) == 0  # no sample: everything held
    holdings.add(Sample(1_000_000, {"d": {tp: 50}}))
    holdings.add(Sample(1_010_000, {"d": {tp: 80}}))
    assert holdings.held_from("d", tp, progress_ms=1_000_000) == 0
    assert holdings.held_from("d", tp, progress_ms=1_000_000 + CLOCK_SKEW_MS) == 50
    assert holdings.held_from("d", tp, progress_ms=1_010_000 + CLOCK_SKEW_MS) == 80
    assert holdings.held_from("other", tp, progress_ms=10**13) == 0


def test_a_final_row_whose_events_went_missing_is_down_for_loss() -> None:
    """The lead recounts a final minute: late (down for lag) while its events waited, down for
    loss once some of them are missing."""
    final = {
        "minute_ms": T0,
        "entered": 10,
        "accepted": 0,
        "delivered": 3,
        "dead_lettered": 0,
        "dead_lettered_by_reason": {},
        "filtered": 0,
        "in_retry": 0,
        "waiting": 7,
        "missing": 0,
        "duplicates": 0,
        "up": False,
        "down_reason": "lag",
        "missing_ids": [],
    }
    counts: dict[str, Any] = {
        "entered": 10,
        "accepted": 0,
        "delivered": 5,
        "dead_lettered_by_reason": {},
        "filtered": 0,
        "in_retry": 0,
        "waiting": 3,
        "missing": 2,
    }
    share: dict[str, Any] = {
        "minute_ms": T0,
        "counts": counts,
        "duplicates": 0,
        "on_time": 3,
        "final": True,
        "lags_ms": [],
        "lag_in": [],
        "process": [],
        "fixed_lags": None,
        "missing_ids": ["id-8", "id-9"],
        "changed_ms": 1,
    }
    row = recounted(final, [share], written_ms=5)
    assert (row["delivered"], row["waiting"], row["missing"]) == (5, 3, 2)
    assert (row["up"], row["down_reason"]) == (False, "loss")
    share["counts"] = {**counts, "delivered": 10, "waiting": 0, "missing": 0}
    assert recounted(final, [share], written_ms=6)["down_reason"] == "lag"
