"""Jumps in a partition's offsets: read again once before they are taken as gaps in the log.

Offsets of one partition come one after another, save where the log has none: records
compacted away, transaction markers, aborted transactions. A consumer cannot tell those from a
fetch that left a record batch out, and a batch left out is never fetched again: the member
reads on past it, commits past it, and its events are lost without an error. The dev broker
(Tansu 0.6) does this now and then, to plain aiokafka consumers as to hifi's
(docs/reliability.md, the soak).

So when a poll's records jump past an offset the member has not read (between polls, or within
one), the worker takes the records before the jump and reads the partition again from it
(`OffsetGaps.cut`). Read again, the records are there (`filled`: a warning, the fetch skipped
them) or the same jump shows (`confirmed`: a gap in the log, taken). A partition whose log has
shown `CONFIRMED_BEFORE_TRUSTED` gaps under this member (a compacted or transactional topic) is
not read again for the next ones (`trusted`): a re-read per poll would halve its throughput.
Each jump is counted in `hifi_offset_gaps_total{topic,verdict}`.
"""

from __future__ import annotations

from collections import Counter as Tally
from typing import Any

from aiokafka import TopicPartition
from prometheus_client import Counter

__all__ = ["CONFIRMED_BEFORE_TRUSTED", "OffsetGaps"]

#: gaps a partition's log shows under a member before the next ones are taken without a re-read
CONFIRMED_BEFORE_TRUSTED = 3

GAPS = Counter(
    "hifi_offset_gaps",
    "Jumps in a partition's offsets, by what reading again found: filled (a fetch had left the"
    " records out), confirmed (a gap in the log), trusted (not read again: the partition's log"
    " has gaps).",
    ["topic", "verdict"],
)


class OffsetGaps:
    """The jumps in offsets of one worker's run, per owned partition."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._rereading: dict[TopicPartition, tuple[int, int]] = {}  # jump read again: from, to
        self._confirmed: Tally[TopicPartition] = Tally()

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Assigned or revoked: the reading starts over."""
        for tp in partitions:
            self._rereading.pop(tp, None)
            self._confirmed.pop(tp, None)

    def cut(
        self, tp: TopicPartition, records: list[Any], read_to: int | None
    ) -> tuple[list[Any], int | None]:
        """The records of `tp` to take, and where to read again from (None: nowhere): all of
        them unless they jump past an offset not read (from `read_to`, the next offset the
        member expects, when known); then those before the jump, and the offset it skipped."""
        expected = records[0].offset if read_to is None else read_to
        if records[0].offset == expected and records[-1].offset - expected == len(records) - 1:
            self._filled(tp, expected + len(records))  # one after another: no scan
            return records, None
        for index, record in enumerate(records):
            if record.offset <= expected:
                expected = max(expected, record.offset + 1)
                continue
            self._filled(tp, expected)
            jump = (expected, record.offset)
            if self._rereading.get(tp) == jump:  # read again, the same jump: the log's
                del self._rereading[tp]
                self._confirmed[tp] += 1
                GAPS.labels(tp.topic, "confirmed").inc()
                self._log.info(
                    "offset_gap_confirmed", partition=f"{tp.topic}/{tp.partition}", skipped=jump
                )
            elif self._confirmed[tp] >= CONFIRMED_BEFORE_TRUSTED:
                GAPS.labels(tp.topic, "trusted").inc()
            else:
                self._rereading[tp] = jump
                return records[:index], jump[0]
            expected = record.offset + 1
        self._filled(tp, expected)
        return records, None

    def _filled(self, tp: TopicPartition, reached: int) -> None:
        """The member read `tp` past a jump it was reading again: the fetch had left it out."""
        rereading = self._rereading.get(tp)
        if rereading is None or reached <= rereading[0]:
            return
        del self._rereading[tp]
        GAPS.labels(tp.topic, "filled").inc()
        self._log.warning(
            "offset_gap_filled",
            partition=f"{tp.topic}/{tp.partition}",
            skipped=rereading,
            hint="a fetch left out records the broker had; read again, nothing was lost",
        )
