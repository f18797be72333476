"""A destination over all its shares, as one member of its auditor group sees it.

What each share says of itself comes from its owner's memory (this member's shares) or from
the board (`auditor/board.py`, the others'): its progress, its settled horizon
(`closed_before_ms`), its rows. Over the destination's source partitions:

- its settling clock is the least progress of its shares (a share nobody posted yet holds it):
  every share settles a minute at the same point, as one auditor over every partition would;
- a minute is final when every share's horizon is past it (`final_before_ms`);
- its row of a minute is the sum of its shares' rows (`auditor/share_rows.py`); a final one is
  the row the lead share's member wrote (`auditor/lead.py`), else summed from the shares'.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import TopicPartition

from auditor.share_rows import Row, merged_row, share_row
from config.destination import Destination
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.ledger import Ledger

# A share keeps posting a final row this long after the destination's horizon passed it, or
# after it changed: every member, the lead's first, reads it in time.
KEEP_POSTED_MS = 2 * MINUTE_MS
# A final minute's spread once let go: the lead merged the minute, and its lags are in the row
# it wrote (a late change recounts the counts only, `auditor/lead.py` `recounted`).
LET_GO = b""


def share_entry(
    ledger: Ledger, *, horizon_ms: int, changed: Mapping[int, int], now_ms: int
) -> dict[str, Any]:
    """What a share posts of one destination: its horizon, and its rows of every minute it
    holds; final ones well behind the destination's horizon (their lags fixed in the lead's
    row) without their distributions, unless they changed lately.

    A final minute's distributions no member will read again are let go (`LET_GO`): the
    share keeps its final minutes for `retention_min`, and their lags by value would grow its
    memory for as long."""
    keep_from = horizon_ms - KEEP_POSTED_MS
    recent_ms = now_ms - KEEP_POSTED_MS
    rows = []
    for bucket in ledger.rows():
        changed_ms = changed.get(bucket.minute_ms, 0)
        spread = not bucket.final or bucket.minute_ms >= keep_from or changed_ms >= recent_ms
        if not spread and bucket.spread:
            bucket.spread = LET_GO
        rows.append(share_row(ledger, bucket, changed_ms=changed_ms, spread=spread))
    return {
        "closed_before_ms": ledger.closed_before_ms,
        "first_minute_ms": ledger.first_minute_ms,
        "waiting": ledger.waiting_events(),
        "rows": rows,
    }


class DestinationView:
    """One destination's shares, as last posted or held, and what they add up to."""

    def __init__(self, dest: Destination, partitions: Iterable[TopicPartition]) -> None:
        self.dest = dest
        self.partitions = sorted(partitions)
        self.shares: dict[TopicPartition, dict[str, Any]] = {}  # partition: its entry's dest part
        self.progress: dict[TopicPartition, int] = {}
        self.members: dict[TopicPartition, str] = {}  # which member posted each share last
        self.posted_ms: dict[TopicPartition, int] = {}  # when (its member's wall clock)
        self.final_rows: dict[int, Row] = {}  # the lead's merged final rows, by minute

    @property
    def lead(self) -> TopicPartition | None:
        """The destination's lead share: its first source partition."""
        return self.partitions[0] if self.partitions else None

    def update(self, entries: Mapping[TopicPartition, Mapping[str, Any]]) -> None:
        """Take the shares' latest entries (the board's and this member's own)."""
        name = self.dest.name
        for tp in self.partitions:
            entry = entries.get(tp)
            if entry is None or name not in entry["dests"]:
                continue
            self.shares[tp] = entry["dests"][name]
            self.progress[tp] = int(entry["progress_ms"])
            self.members[tp] = str(entry["member"])
            self.posted_ms[tp] = int(entry.get("written_ms") or 0)

    def progress_ms(self, own: Mapping[TopicPartition, int]) -> int:
        """The destination's settling clock: the least progress of its shares (this member's
        own as it reads them now); 0 while a share was never posted."""
        least: int | None = None
        for tp in self.partitions:
            ms = own.get(tp, self.progress.get(tp))
            if ms is None:
                return 0
            least = ms if least is None else min(least, ms)
        return least or 0

    def final_before_ms(self) -> int:
        """Minutes before this are final in every share."""
        if not self.partitions or any(tp not in self.shares for tp in self.partitions):
            return 0
        return min(int(self.shares[tp]["closed_before_ms"] or 0) for tp in self.partitions)

    def counted_from_ms(self) -> int | None:
        firsts = [s["first_minute_ms"] for s in self.shares.values() if s["first_minute_ms"]]
        return min(firsts) if firsts else None

    def waiting_events(self) -> int:
        return sum(int(s["waiting"]) for s in self.shares.values())

    def rows_by_minute(self) -> dict[int, list[Row]]:
        by_minute: dict[int, list[Row]] = defaultdict(list)
        for entry in self.shares.values():
            for row in entry["rows"]:
                by_minute[int(row["minute_ms"])].append(row)
        return by_minute

    def rows(self, *, from_ms: int | None, to_ms: int | None, now_ms: int) -> list[Row]:
        """The destination's rows (archive `minutes` format), by minute: final ones as the lead
        wrote them, the others summed from the shares'."""
        final_before = self.final_before_ms()
        found: dict[int, Row] = dict(self.final_rows)
        for minute, rows in self.rows_by_minute().items():
            if minute >= final_before or minute not in found:
                found[minute] = merged_row(
                    rows,
                    self.dest.accounting,
                    minute_ms=minute,
                    final=minute < final_before,
                    written_ms=now_ms,
                )
        return [
            found[m]
            for m in sorted(found)
            if (from_ms is None or m >= from_ms) and (to_ms is None or m < to_ms)
        ]

    def unsettled(self) -> int:
        final_before = self.final_before_ms()
        return sum(1 for minute in self.rows_by_minute() if minute >= final_before)
