"""The counters an availability burn rate divides agree with the auditor's availability."""

from __future__ import annotations

import uuid

from prometheus_client import REGISTRY

from auditor import metrics
from config.destination import Accounting
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.ledger import Ledger
from hifi.audit import FORMAT_MAJOR, FORMAT_MINOR, Fact, Slice
from hifi.vocabulary import Outcome

T0 = 1_790_000_040_000 - 1_790_000_040_000 % MINUTE_MS  # a minute start
TP = ("events", 0)


def delivered(dest: str, offsets: list[int], *, event_ms: int, at_ms: int) -> Fact:
    ids: list[str | None] = [f"id-{o}" for o in offsets]
    times = [event_ms] * len(offsets)
    slice_ = Slice(TP[0], TP[1], offsets, ids, times, times)
    return Fact(
        FORMAT_MAJOR, FORMAT_MINOR, uuid.uuid4().hex, dest, "test", str(Outcome.DELIVERED), None, None,
        at_ms, [slice_],
    )  # fmt: skip


def advance(book: Ledger, progress_ms: int) -> None:
    """What the auditor does after each commit (`auditor/accounts.py`)."""
    final_before_ms = book.last_final_ms
    for settled in book.advance(progress_ms):
        bucket = settled.bucket
        metrics.count_settled(book.dest, book.tally(bucket), book.lags(bucket).p95_ms, settled)
    metrics.count_final(book.dest, book.first_minute_ms, final_before_ms, book.last_final_ms)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_final_and_down_minutes_count_what_availability_divides() -> None:
    """Empty minutes count as final and up; a minute with a missing event is down for loss and
    one over lag_sla_s is down for lag; 1 - down / final is the auditor's availability."""
    dest = f"counters-{uuid.uuid4().hex[:8]}"
    metrics.create_series(dest, lag_sla_s=1.0)
    assert sample("hifi_auditor_lag_sla_seconds", dest=dest) == 1.0
    book = Ledger(dest, Accounting(settle_s=60.0))
    book.enter(T0, TP, range(10))  # minute 0: 9 of 10 delivered on time, one missing
    book.apply(delivered(dest, list(range(9)), event_ms=T0 + 1000, at_ms=T0 + 1200))
    late = T0 + 2 * MINUTE_MS  # minute 2: all delivered, 3 s after their event time
    book.enter(late, TP, range(10, 20))
    book.apply(delivered(dest, list(range(10, 20)), event_ms=late + 1000, at_ms=late + 4000))
    progress_ms = T0 + 6 * MINUTE_MS  # minutes 0..4 are final (settle_s = 60 s)
    advance(book, progress_ms)
    final = sample("hifi_auditor_final_minutes_total", dest=dest)
    loss = sample("hifi_auditor_down_minutes_total", dest=dest, reason="loss")
    lag = sample("hifi_auditor_down_minutes_total", dest=dest, reason="lag")
    assert (final, loss, lag) == (5, 1, 1)
    assert book.availability(progress_ms) == 1 - (loss + lag) / final

    advance(book, progress_ms + 3 * MINUTE_MS)  # three empty minutes more, all up
    assert sample("hifi_auditor_final_minutes_total", dest=dest) == 8
    assert sample("hifi_auditor_down_minutes_total", dest=dest, reason="loss") == 1
    advance(book, progress_ms + 3 * MINUTE_MS)  # nothing new became final: nothing counted
    assert sample("hifi_auditor_final_minutes_total", dest=dest) == 8
