"""Accepted events in a destination's ledger: counted per minute, and what missing is counted from."""

from __future__ import annotations

import uuid

import msgspec

from auditor.missing import missing_origins
from config.destination import Accounting
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.ledger import Ledger
from hifi.accounting.tables import archive_row, render, report_row
from hifi.audit import FORMAT_MAJOR, FORMAT_MINOR, Fact, Slice
from hifi.audit.accepted import accepted_event, accepted_facts
from hifi.vocabulary import Outcome

T0 = 1_790_000_040_000 - 1_790_000_040_000 % MINUTE_MS  # a minute start
TOPIC = "clicks"
TP = (TOPIC, 0)
SETTLED_MS = T0 + MINUTE_MS + 60_000  # the progress at which minute T0 is final (settle_s 60)


def accepted(offsets: list[int], *, event_ms: int = T0 + 1000) -> Fact:
    """The fact ingest writes for events it had acknowledged at `offsets` of clicks/0."""
    events = [accepted_event(TOPIC, 0, o, f"id-{o}", event_ms, event_ms + 3) for o in offsets]
    (fact,) = accepted_facts("ingest@h:1", events, accepted_ms=event_ms + 5)
    return fact


def delivered(offsets: list[int], *, at_ms: int = T0 + 2000, event_ms: int = T0 + 1000) -> Fact:
    n = len(offsets)
    part = Slice(TOPIC, 0, offsets, [f"id-{o}" for o in offsets], [event_ms] * n, [event_ms] * n)
    return Fact(
        FORMAT_MAJOR,
        FORMAT_MINOR,
        uuid.uuid4().hex,
        "d",
        "connector@h:2",
        str(Outcome.DELIVERED),
        None,
        200,
        at_ms,
        [part],
    )


def ledger() -> Ledger:
    return Ledger("d", Accounting(settle_s=60.0))


def test_accepted_events_are_counted_in_their_minute_beside_what_entered() -> None:
    """Five events accepted, entered and delivered: `accepted` 5 in their minute, nothing
    missing; the row carries the count to /tables, the archive and the terminal table."""
    book = ledger()
    book.enter(T0, TP, range(5))
    book.apply(accepted([0, 1, 2, 3, 4]))
    book.apply(delivered([0, 1, 2, 3, 4]))
    counts = book.tally(book.buckets[T0])
    assert (counts.entered, counts.accepted, counts.delivered, counts.missing) == (5, 5, 5, 0)
    (settled,) = book.advance(SETTLED_MS)
    assert (settled.bucket.up, settled.alarm) == (True, False)
    row = report_row(archive_row(book, settled.bucket, written_ms=SETTLED_MS))
    assert (row["entered"], row["accepted"], row["missing"]) == (5, 5, 0)
    headers = [column.header for column in render([row], title="t").columns]
    assert "accepted" in headers


def test_an_accepted_event_that_never_entered_is_missing_once_final() -> None:
    """Offset 7 was acknowledged to a sender but the auditor never saw it enter (Kafka lost it):
    missing once the minute is final, named by its origin, the minute down for loss."""
    book = ledger()
    book.enter(T0, TP, range(3))
    book.apply(accepted([0, 1, 2, 7]))
    book.apply(delivered([0, 1, 2]))
    provisional = book.tally(book.buckets[T0])
    assert (provisional.entered, provisional.accepted, provisional.missing) == (3, 4, 1)
    (settled,) = book.advance(SETTLED_MS)
    counts = book.tally(settled.bucket)
    assert (counts.delivered, counts.missing, counts.accounted) == (3, 1, 4)
    assert settled.alarm
    assert settled.loss_ratio == 0.25
    assert (settled.bucket.up, settled.bucket.down_reason) == (False, "loss")
    assert missing_origins(settled.bucket) == {TP: [7]}


def test_an_accepted_event_entered_but_never_delivered_is_missing_and_a_late_2xx_moves_it() -> None:
    """Accepted and entered, never delivered by the time the minute is final: missing; its 2xx
    read later moves it to delivered."""
    book = ledger()
    book.enter(T0, TP, range(2))
    book.apply(accepted([0, 1]))
    book.apply(delivered([0]))
    (settled,) = book.advance(SETTLED_MS)
    assert book.tally(settled.bucket).missing == 1
    book.apply(delivered([1], at_ms=SETTLED_MS + 1000))
    counts = book.tally(settled.bucket)
    assert (counts.delivered, counts.missing) == (2, 0)


def test_an_accepted_event_counts_once_in_the_minute_of_its_entry_in_either_order() -> None:
    """A destination reading the topic with another time field files the entries a minute
    later: the accepted events follow them, whether the fact or the record is read first."""
    later = T0 + MINUTE_MS
    first_fact = ledger()
    first_fact.apply(accepted([0, 1]))  # by its own time: minute T0
    first_fact.enter(later, TP, [0, 1])
    first_record = ledger()
    first_record.enter(later, TP, [0, 1])
    first_record.apply(accepted([0, 1]))
    for book in (first_fact, first_record):
        assert book.tally(book.buckets[later]).accepted == 2
        assert T0 not in book.buckets or book.tally(book.buckets[T0]).accepted == 0
        assert sum(book.tally(b).missing for b in book.rows()) == 2  # not delivered yet


def test_a_destination_without_accepted_events_counts_as_before() -> None:
    """No accepted fact: `accepted` 0, missing counted from what entered, no terminal column."""
    book = ledger()
    book.enter(T0, TP, range(4))
    book.apply(delivered([0, 1, 2]))
    (settled,) = book.advance(SETTLED_MS)
    counts = book.tally(settled.bucket)
    assert (counts.entered, counts.accepted, counts.missing, counts.accounted) == (4, 0, 1, 4)
    assert settled.loss_ratio == 0.25
    row = report_row(archive_row(book, settled.bucket, written_ms=SETTLED_MS))
    assert [c.header for c in render([row], title="t").columns][1:3] == ["entered", "delivered"]


def test_accepted_events_survive_a_snapshot_and_an_older_snapshot_restores() -> None:
    """The accepted bitmaps ride in the snapshot; one written before accepted facts (no such
    key in its buckets, no count in its final ones) restores with none."""
    book = ledger()
    book.apply(accepted([0, 9]))
    book.enter(T0, TP, [0])
    state = msgspec.msgpack.decode(msgspec.msgpack.encode(book.snapshot()))
    again = ledger()
    again.restore(state)
    assert again.tally(again.buckets[T0]).accepted == 2
    again.enter(T0 + MINUTE_MS, TP, [9])  # the record read after the restore: it follows it
    assert again.tally(again.buckets[T0 + MINUTE_MS]).accepted == 1
    for raw in state["buckets"]:
        del raw["accepted"]
    older = ledger()
    older.restore(state)
    assert older.tally(older.buckets[T0]).accepted == 0
    older.advance(SETTLED_MS)
    final = msgspec.msgpack.decode(msgspec.msgpack.encode(older.snapshot()))
    for raw in final["buckets"]:
        del raw["counts"]["accepted"]
    oldest = ledger()
    oldest.restore(final)
    assert oldest.tally(oldest.buckets[T0]).accepted == 0


def test_an_older_archive_row_reads_with_no_accepted_events() -> None:
    """A minutes row written before `accepted` existed reports 0 accepted."""
    book = ledger()
    book.enter(T0, TP, [0])
    row = archive_row(book, book.buckets[T0], written_ms=T0)
    del row["accepted"]
    assert report_row(row)["accepted"] == 0


def test_accepted_events_before_the_first_entry_seen_are_not_counted() -> None:
    """A new auditor reads a stream's topic from what its retention kept (offsets 100 on) and
    the audit topic from further back: accepted events before the first offset it saw enter,
    and those of a partition it never saw a record of, cannot be judged and are not counted."""
    book = ledger()
    book.apply(accepted([5, 6]))  # read before the topic's first record
    book.enter(T0, TP, range(100, 103))
    book.apply(accepted([7, 100, 101, 102]))
    book.apply(delivered([100, 101, 102]))
    never = [accepted_event(TOPIC, 1, 3, "x", T0 + 1000, T0 + 1000)]
    book.apply(accepted_facts("ingest@h:1", never, accepted_ms=T0 + 1000)[0])
    assert book.tally(book.buckets[T0]).accepted == 4  # partition 1's, until it settles
    (settled,) = book.advance(SETTLED_MS)
    counts = book.tally(settled.bucket)
    assert (counts.entered, counts.accepted, counts.delivered, counts.missing) == (3, 3, 3, 0)
    again = ledger()
    again.restore(msgspec.msgpack.decode(msgspec.msgpack.encode(book.snapshot())))
    assert again.acceptance.entered_from == {TP: 100}
