"""Late outcomes: a fact for events of final minutes still waiting for one (in retry, waiting in a
source partition, or missing) moves them; and where the delivering group stands moves the
line between waiting and missing (`split_waiting`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyroaring import BitMap

from auditor.buckets import Bucket, Change, Partition, held_in
from hifi.audit import Fact
from hifi.vocabulary import Outcome


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
    return rise
