"""Late is not lost, at the source: a final minute down for loss whose missing events all turn up
is down for late in the ledger's bucket, its down minutes and its row, and in the lead's merged
row, its down minutes and the availability gauge; loss again when events go missing again."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from prometheus_client import REGISTRY

from auditor import metrics
from auditor.lead import recounted, serve
from auditor.merged import DestinationView, share_entry
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.ledger import Ledger
from hifi.accounting.tables import archive_row, report_row
from hifi.audit import FORMAT_MAJOR, FORMAT_MINOR, Fact, Slice
from hifi.vocabulary import Outcome
from tests.auditor.support import audited_destination
from tests.auditor.test_ledger import T0, TP, fact, ledger

SETTLED_MS = T0 + MINUTE_MS + 61_000  # T0 is final (settle_s 60)


def test_a_ledger_minute_down_for_loss_whose_events_arrive_late_is_down_for_late() -> None:
    """Two of five events missing when T0 settles (down for loss); their delivered facts come
    after: the bucket, the down minutes and the minute's row say late, and the minute stays down."""
    book = ledger()
    book.enter(T0, TP, range(5))
    book.apply(fact(Outcome.DELIVERED, [0, 1, 2], at_ms=T0 + 1500))
    (settled,) = book.advance(SETTLED_MS)
    bucket = settled.bucket
    assert (bucket.up, bucket.down_reason, book.down_minutes) == (False, "loss", {T0: "loss"})

    book.apply(fact(Outcome.DELIVERED, [3], at_ms=SETTLED_MS + 1_000))  # one still missing
    assert (bucket.down_reason, book.down_minutes) == ("loss", {T0: "loss"})
    (change,) = book.apply(fact(Outcome.DELIVERED, [4], at_ms=SETTLED_MS + 2_000))
    assert change.minute_ms == T0  # the minute's row is written again
    row = archive_row(book, bucket, written_ms=SETTLED_MS + 2_000)
    assert (row["missing"], row["up"], row["down_reason"]) == (0, False, "late")
    assert book.down_minutes == {T0: "late"}
    assert book.availability(SETTLED_MS) == 0.0  # late is down, as lag is


def test_a_ledger_minute_goes_late_on_a_rewind_and_loss_again_when_committed_past() -> None:
    """Events the group commits past are missing (loss); moving its offset back holds them again
    (late, not lost); committing past them again loses them again (loss)."""
    book = ledger()
    book.enter(T0, TP, range(4))
    book.hold({TP: 0})
    (settled,) = book.advance(SETTLED_MS)
    bucket = settled.bucket
    assert (bucket.up, bucket.down_reason) == (False, "lag")  # waiting: late events
    assert book.hold({TP: 2}) == ([T0], [T0])
    assert (bucket.down_reason, book.down_minutes[T0]) == ("loss", "loss")
    assert book.hold({TP: 0}) == ([T0], [])  # a rewind: held again
    assert (bucket.up, bucket.down_reason, book.down_minutes[T0]) == (False, "late", "late")
    assert book.hold({TP: 3}) == ([T0], [T0])
    assert (bucket.down_reason, book.down_minutes[T0]) == ("loss", "loss")


def _delivered(dest: str, tp: TopicPartition, offsets: list[int], *, at_ms: int) -> Fact:
    times = [T0 + 1000] * len(offsets)
    ids: list[str | None] = [f"{tp.partition}-{o}" for o in offsets]
    slice_ = Slice(tp.topic, tp.partition, offsets, ids, times, times)
    return Fact(
        FORMAT_MAJOR, FORMAT_MINOR, uuid.uuid4().hex, dest, "test", str(Outcome.DELIVERED), None,
        200, at_ms, [slice_],
    )  # fmt: skip


def _down(dest: str, reason: str) -> float:
    labels = {"dest": dest, "reason": reason}
    return REGISTRY.get_sample_value("hifi_auditor_down_minutes_total", labels) or 0.0


def test_the_leads_merged_minute_down_for_loss_turns_late_when_its_events_arrive(
    catalog_dir: Path,
) -> None:
    """Two shares; two events of P1 missing when T0 becomes final (the lead writes it down for
    loss); their late deliveries recount it: a new row down for late, late in the lead's down
    minutes, still down in the availability gauge, counted once in the down minutes' counter."""
    name = f"late{uuid.uuid4().hex[:8]}"
    dest = audited_destination(catalog_dir, name, "http://d.test/in", "src")
    p0, p1 = TopicPartition("src", 0), TopicPartition("src", 1)
    books = {p0: Ledger(name, dest.accounting), p1: Ledger(name, dest.accounting)}
    books[p0].enter(T0, ("src", 0), range(3))
    books[p0].apply(_delivered(name, p0, [0, 1, 2], at_ms=T0 + 1500))
    books[p1].enter(T0, ("src", 1), range(4))
    books[p1].apply(_delivered(name, p1, [0, 1], at_ms=T0 + 1500))
    settled_ms = T0 + MINUTE_MS + 2_000  # T0 final (settle_s 1)
    for book in books.values():
        book.advance(settled_ms)
    metrics.create_series(name, lag_sla_s=dest.accounting.lag_sla_s)
    view = DestinationView(dest, [p0, p1])
    state: dict[str, Any] = {}
    written: list[dict[str, Any]] = []

    def look(now_ms: int, changed: dict[TopicPartition, dict[int, int]]) -> None:
        view.update(
            {
                tp: {
                    "member": "m",
                    "written_ms": now_ms,
                    "progress_ms": settled_ms,
                    "dests": {
                        name: share_entry(
                            book, horizon_ms=0, changed=changed.get(tp, {}), now_ms=now_ms
                        )
                    },
                }
                for tp, book in books.items()
            }
        )
        serve(view, state, write_row=written.append, now_ms=now_ms, retention_ms=30 * MINUTE_MS)

    look(settled_ms, {})
    (first,) = written
    assert (first["missing"], first["up"], first["down_reason"]) == (2, False, "loss")
    assert (_down(name, "loss"), state["down"]) == (1, [[T0, "loss"]])

    (change,) = books[p1].apply(_delivered(name, p1, [2, 3], at_ms=settled_ms + 1_000))
    look(settled_ms + 2_000, {p1: {change.minute_ms: settled_ms + 1_000}})
    again = written[-1]
    assert len(written) == 2
    assert (again["missing"], again["delivered"], again["up"], again["down_reason"]) == (
        0,
        7,
        False,
        "late",
    )
    assert view.final_rows[T0]["down_reason"] == "late"
    assert report_row(again)["down_reason"] == "late"
    assert state["down"] == [[T0, "late"]]
    assert REGISTRY.get_sample_value("hifi_auditor_availability_ratio", {"dest": name}) == 0.0
    assert (_down(name, "loss"), _down(name, "lag"), _down(name, "late")) == (1, 0, 0)


def test_a_recounted_late_row_is_down_for_loss_again_when_events_go_missing_again() -> None:
    """The lead's recount of a row down for late whose missing rose: down for loss again."""
    late: dict[str, Any] = {
        "minute_ms": T0,
        "missing": 0,
        "waiting": 2,
        "up": False,
        "down_reason": "late",
    }
    counts = {
        "entered": 4,
        "accepted": 0,
        "delivered": 2,
        "dead_lettered_by_reason": {},
        "filtered": 0,
        "in_retry": 0,
        "waiting": 0,
        "missing": 2,
    }
    share = {
        "minute_ms": T0,
        "counts": counts,
        "duplicates": 0,
        "on_time": 2,
        "final": True,
        "lags_ms": [],
        "lag_in": [],
        "process": [],
        "fixed_lags": None,
        "missing_ids": [],
        "changed_ms": 1,
    }
    row = recounted(late, [share], written_ms=5)
    assert (row["missing"], row["up"], row["down_reason"]) == (2, False, "loss")
    share["counts"] = {**counts, "waiting": 2, "missing": 0}  # held again: late
    assert recounted(row, [share], written_ms=6)["down_reason"] == "late"
