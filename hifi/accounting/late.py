"""Late outcomes: a fact for events of final minutes still waiting for one (in retry, waiting in a
source partition, or missing) moves them; and where the delivering group stands moves the
line between waiting and missing (`split_waiting`). Late is not lost: a final minute down for
`loss` whose `missing` falls to 0 is down for `late` from then (`rejudged`), in the ledger's
buckets and down minutes as in the lead's merged rows (`auditor/lead.py`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyroaring import BitMap

from hifi.accounting.buckets import Bucket, Change, Partition, held_in
from hifi.audit import Fact
from hifi.vocabulary import Outcome

#: down for loss: events of the minute are missing (`buckets.judge`, or since it became final)
LOSS = "loss"
#: down for late: a minute once down for loss whose missing events all turned up after it became
#: final (a late outcome, the group's offset moved back); late events count as lag, never loss
LATE = "late"


def resolve_waiting(
    buckets: Iterable[Bucket],
    tp: Partition,
    offsets: BitMap,
    fact: Fact,
    changes: dict[int, Change],
    held_from: Mapping[Partition, int] | None,
) -> None:
    """A late outcome for events of final buckets still waiting for one; `changes` collects
    what it moved per minute."""
    outcome = fact.outcome
    for bucket in buckets:
        waiting = bucket.waiting.get(tp)
        if not waiting or bucket.counts is None:
            continue
        hit = waiting & offsets
        if not hit:
            continue
        counts, n = bucket.counts, len(hit)
        retrying = bucket.retrying.setdefault(tp, BitMap())
        change = changes.setdefault(bucket.minute_ms, Change(bucket.minute_ms))
        if outcome in (Outcome.HANDED_OFF, Outcome.RE_OFFERED):
            new = hit - retrying
            retrying |= new
            counts.in_retry += len(new)
            split_waiting(bucket, held_from)
            continue
        counts.in_retry -= len(hit & retrying)
        waiting.difference_update(hit)
        retrying.difference_update(hit)
        if outcome == Outcome.DELIVERED:
            counts.delivered += n
            change.delivered += n
        elif outcome == Outcome.DEAD_LETTERED:
            reason = fact.reason or "unknown"
            by_reason = counts.dead_lettered_by_reason
            by_reason[reason] = by_reason.get(reason, 0) + n
            change.dead_lettered += n
        else:
            counts.filtered += n
            change.filtered += n
        split_waiting(bucket, held_from)


def split_waiting(bucket: Bucket, held_from: Mapping[Partition, int] | None) -> int:
    """Count a final bucket's events without an outcome and not in retry again: waiting while
    their partition still holds them (at or after `held_from`, where the delivering group has
    not committed past them and retention has not removed them), else missing. How much its
    `missing` rose (negative: fell)."""
    counts = bucket.counts
    assert counts is not None, "only a final bucket keeps its events one by one"
    waiting = missing = 0
    for tp, unresolved in bucket.waiting.items():
        retrying = bucket.retrying.get(tp)
        rest = unresolved - retrying if retrying else unresolved
        held = None if held_from is None else held_from.get(tp)
        unseen = bucket.unseen.get(tp)  # never seen entering: held nowhere
        kept = 0 if held is None else held_in(rest - unseen if unseen else rest, held)
        waiting += kept
        missing += len(rest) - kept
    rise = missing - counts.missing
    counts.waiting, counts.missing = waiting, missing
    bucket.up, bucket.down_reason = rejudged(bucket.up, bucket.down_reason, missing, rise)
    return rise


def rejudged(
    up: bool | None, down_reason: str | None, missing: int, rise: int
) -> tuple[bool | None, str | None]:
    """A final minute's verdict after its `missing` moved by `rise` (negative: fell) to
    `missing`: down for loss when events went missing since, down for late when it was down for
    loss and none is missing now, else as it was judged."""
    if missing and rise > 0:
        return False, LOSS
    if not missing and up is False and down_reason == LOSS:
        return False, LATE
    return up, down_reason


def hold_again(
    buckets: Iterable[Bucket], held_from: Mapping[Partition, int] | None
) -> tuple[list[int], list[int]]:
    """`split_waiting` of every final bucket still keeping events one by one: the minutes it
    moved, and of those the ones whose `missing` rose."""
    moved, rose = [], []
    for bucket in buckets:
        if bucket.final and bucket.waiting:
            rise = split_waiting(bucket, held_from)
            if rise:
                moved.append(bucket.minute_ms)
            if rise > 0:
                rose.append(bucket.minute_ms)
    return moved, rose


def note_verdicts(
    buckets: Mapping[int, Bucket], minutes: Iterable[int], down_minutes: dict[int, str]
) -> None:
    """The down minutes (minute: reason) as the verdicts of `minutes` read after they moved."""
    for minute in minutes:
        bucket = buckets[minute]
        if bucket.up is False and bucket.down_reason is not None:
            down_minutes[minute] = bucket.down_reason
