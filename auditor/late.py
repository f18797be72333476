"""Late outcomes: a fact for events of final minutes still waiting for one (in retry, or missing) moves them."""

from __future__ import annotations

from collections.abc import Iterable

from pyroaring import BitMap

from auditor.buckets import Bucket, Change, Partition
from hifi.audit import Fact
from hifi.vocabulary import Outcome


def resolve_waiting(
    buckets: Iterable[Bucket],
    tp: Partition,
    offsets: BitMap,
    fact: Fact,
    changes: dict[int, Change],
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
            counts.missing -= len(new)
            continue
        was_retrying = len(hit & retrying)
        counts.in_retry -= was_retrying
        counts.missing -= n - was_retrying
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
