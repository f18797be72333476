"""Accepted events in a destination's buckets: counted per minute, and part of what `missing` is counted from.

The ingest service writes a fact of the events it had Kafka acknowledge before its 2xx
(`hifi/audit/accepted.py`), naming each by the origin the auditor also sees entering
(`topic/partition/offset`). For a destination reading that topic, a minute's `missing` is
then counted from its entered events and its accepted ones together: an event a sender was
promised that never entered (Kafka lost it) or never got an outcome is missing.

An accepted event counts in one minute, that of its entry: the same rule as an entry
(`Ledger.bucket_for_entry`, its time, ingest's arrival time standing in for the Kafka
timestamp it stamped), and when the auditor saw it enter another open minute first (a
destination reading the topic with another `event_time_field`), it follows its entry, in
whichever order the fact and the record are read. An accepted event never seen entering counts
in the minute of its own time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pyroaring import BitMap

from hifi.accounting.buckets import Bucket, Partition, Problem
from hifi.accounting.incarnations import key
from hifi.audit import Fact


class Acceptance:
    """The accepted events of one destination's open minutes (a `Ledger`'s)."""

    def __init__(
        self,
        buckets: Mapping[int, Bucket],
        open_bucket: Callable[[int], Bucket],
        minute_of_entry: Callable[[int, int], tuple[int, Problem | None]],
    ) -> None:
        """The ledger's buckets (kept, not copied), how it opens one, and its entries' rule."""
        self._buckets = buckets
        self._open_bucket = open_bucket
        self._minute_of_entry = minute_of_entry
        self.partitions: set[Partition] = set()  # those with accepted events in open minutes
        # the first offset of each partition seen entering: before it, an accepted event cannot
        # be judged (a new auditor group reads a source topic from what its retention kept)
        self.entered_from: dict[Partition, int] = {}

    def take(self, fact: Fact, epochs: Sequence[int]) -> None:
        """Note an accepted fact: each event in the open minute it entered in, else in the
        minute an entry of its time would count in. `epochs`: as `Ledger.apply`'s."""
        for i, part in enumerate(fact.slices):
            tp = (key(part.topic, epochs[i]) if epochs else part.topic, part.partition)
            low = self.entered_from.get(tp, 0)
            by_minute: dict[int, BitMap] = defaultdict(BitMap)
            for offset, event_ms, taken_ms in zip(
                part.offsets, part.event_times_ms, part.taken_ms, strict=True
            ):
                if offset < low:
                    continue
                minute, _ = self._minute_of_entry(event_ms, taken_ms or event_ms)
                by_minute[minute].add(offset)
            for minute, offsets in by_minute.items():
                left = self._with_entries(tp, offsets)
                if left:
                    _add(self._open_bucket(minute).accepted, tp, left)
            self.partitions.add(tp)

    def _with_entries(self, tp: Partition, offsets: BitMap) -> BitMap:
        """Accepted events already seen entering an open minute, noted there; the rest returned.
        Those still waiting in a final minute are counted there already: dropped."""
        for bucket in self._buckets.values():
            if bucket.final:
                waiting = bucket.waiting.get(tp)
                if waiting:
                    offsets = offsets - waiting
                continue
            entered = bucket.entered.get(tp)
            here = offsets & entered if entered else None
            if here:
                _add(bucket.accepted, tp, here)
                offsets = offsets - here
        return offsets

    def entered(self, minute_ms: int, tp: Partition, offsets: Sequence[int]) -> None:
        """Entries of `tp` in `minute_ms`: the first of a partition drops the accepted events
        before it; accepted events noted in another open minute follow them. Call it for the
        partitions in `partitions`, and for those not yet in `entered_from`."""
        if tp not in self.entered_from:
            low = self.entered_from[tp] = min(offsets)
            for bucket in self._buckets.values():
                accepted = bucket.accepted.get(tp)
                if accepted is not None and not bucket.final:
                    accepted.remove_range(0, low)
        if tp not in self.partitions:
            return
        entering = BitMap(offsets)
        target = self._buckets[minute_ms]
        for bucket in self._buckets.values():
            accepted = bucket.accepted.get(tp)
            if bucket is target or bucket.final or not accepted:
                continue
            moved = accepted & entering
            if moved:
                accepted.difference_update(moved)
                if not accepted:
                    del bucket.accepted[tp]
                _add(target.accepted, tp, moved)

    def unjudged(self, bucket: Bucket) -> None:
        """Before a minute settles: accepted events of a partition never seen entering cannot be
        judged (all its records expired before the auditor read it), so they are not counted."""
        for tp in [tp for tp in bucket.accepted if tp not in self.entered_from]:
            del bucket.accepted[tp]

    def state(self) -> list[list[Any]]:
        return [[tp[0], tp[1], offset] for tp, offset in self.entered_from.items()]

    def restore(self, raw: Iterable[Sequence[Any]]) -> None:
        self.entered_from = {(str(t), int(p)): int(o) for t, p, o in raw}
        self.settled()

    def settled(self) -> None:
        """After minutes became final (or a restore): the partitions still with accepted events
        in open minutes."""
        self.partitions = {tp for b in self._buckets.values() if not b.final for tp in b.accepted}


def _add(bitmaps: dict[Partition, BitMap], tp: Partition, offsets: BitMap) -> None:
    bitmap = bitmaps.get(tp)
    if bitmap is None:
        bitmaps[tp] = BitMap(offsets)
    else:
        bitmap |= offsets
