"""Where a member reads each partition of the audit topic from, and whether it is still the topic
its shares' snapshots read.

A share remembers how far it applied each audit partition (`Share.audit_next`) and the Kafka
time of the record before that offset (`Share.audit_stamps`). An audit topic deleted and
created again (a cluster rebuilt, a fresh dev broker beside a kept archive) starts its offsets
again at 0: reading on from the remembered offset would skip the new topic's facts, and an
offset it never reaches would wait for good. So on assignment a member reads each audit
partition from the record before the least remembered offset, and its first record tells:

- the same offset with the same Kafka time: the same topic; the record was applied already;
- another offset below it (Kafka answered OFFSET_OUT_OF_RANGE and the consumer started at the
  earliest offset), or the same offset with another time: the topic started over. Every share
  forgets its offset there and the partition is read from 0, its facts applied anew;
- an offset above it: retention removed that record; the topic is taken as the same.

A new topic whose end is not past that record leaves nothing to look at (a broker that
answers a fetch beyond the end with nothing, as Tansu does, or one that ends just there): the
worker, told the record is one read before (`rereads`), notices the end is not past it
(`hifi.worker.restarts`) and says so (`started_over`), as it does for a topic re-created while
the auditor runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiokafka import TopicPartition

from auditor.progress import ProgressClock
from auditor.shares import Share

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _Check:
    offset: int  # the record read first, applied before
    kafka_ms: int  # its Kafka time as the share recorded it


class AuditReading:
    """The audit partitions' starting positions on assignment, and their first records checked."""

    def __init__(self, shares: Mapping[TopicPartition, Share], clock: ProgressClock) -> None:
        self._shares = shares  # the member's, as assigned (`Accounts` holds the dict)
        self._clock = clock
        self._checks: dict[TopicPartition, _Check] = {}

    def positions(self, audit: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Where to read each audit partition from: the least offset a share is to apply next,
        one record earlier when that record's Kafka time is known (to check it)."""
        self._checks = {}
        positions: dict[TopicPartition, int] = {}
        for tp in audit:
            shares = self._shares.values()
            least = min((s.audit_next.get(tp.partition, 0) for s in shares), default=0)
            stamps = {
                s.audit_stamps[tp.partition]
                for s in shares
                if s.audit_next.get(tp.partition, 0) == least and tp.partition in s.audit_stamps
            }
            if least > 0 and len(stamps) == 1:
                self._checks[tp] = _Check(least - 1, stamps.pop())
                positions[tp] = least - 1
            else:
                positions[tp] = least
            self._clock.seek(tp, positions[tp])  # read again from there: its progress too
        return positions

    def rereads(self) -> set[TopicPartition]:
        """The audit partitions read from a record applied before, until it is read."""
        return set(self._checks)

    def checked(self, tp: TopicPartition, records: list[Any]) -> tuple[list[Any], int | None]:
        """A poll of audit partition `tp`: the records to apply, and where to read again from
        (None: go on) when the partition turns out to have started over."""
        check = self._checks.pop(tp, None)
        if check is None:
            return records, None
        first = records[0]
        if first.offset > check.offset:
            return records, None  # retention removed the record: nothing to tell apart
        if first.offset == check.offset and first.timestamp == check.kafka_ms:
            return records[1:], None  # the same topic; its first record was applied before
        self.started_over(tp, read_up_to=check.offset + 1, first_ms=first.timestamp)
        if first.offset == 0:
            return records, None  # the new topic from its beginning
        return [], 0

    def started_over(
        self, tp: TopicPartition, *, read_up_to: int | None = None, first_ms: int | None = None
    ) -> None:
        """Audit partition `tp` was created again: every share reads it from its beginning."""
        self._checks.pop(tp, None)
        least = min((s.audit_next.get(tp.partition, 0) for s in self._shares.values()), default=0)
        for share in self._shares.values():
            share.audit_started_over(tp.partition)
        self._clock.restart(tp)
        log.warning(
            "audit_partition_recreated",
            topic=tp.topic,
            partition=tp.partition,
            read_up_to=least if read_up_to is None else read_up_to,
            first_record_ms=first_ms,
            hint="its facts are read again from offset 0: they name the events of the sources'"
            " incarnation that began when they were taken in",
        )
