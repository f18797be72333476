"""The epoch of each poll of a source partition, while the auditor runs and across its runs.

Two ways tell the auditor that a source partition started over (its topic deleted and created
again, `hifi.accounting.incarnations`): the worker sees it while the auditor runs
(`PartitionHandler.started_over`, `hifi.worker.restarts`), or the auditor sees a poll start below
where it had read, with newer records or a high watermark below that offset (across runs). The
first records read after either begin a new incarnation at their Kafka time.

An audit fact names no epoch: its slices belong to the incarnation that began at or before the
time its events were taken in. So while a partition has not given the first record of its new
topic yet, the facts about its events are held, then applied with that epoch known: none of
the new topic's events counts against the old topic's offsets, even when the connector saw
the new topic first. A partition waits so from the moment the worker saw it start over, or
the auditor's own high watermark of it fell below what it had read (the earliest sign on a
broker that reports the end of a deleted topic). Held facts are in the snapshot, as their
records are committed.

A share restored from its snapshot knows how far the partition was read, not yet whether the
broker still has that topic (a fresh cluster beside a kept archive, a topic re-created while
the auditor was down): its facts wait too, until the partition's first poll tells (the
check above) or its end is where the snapshot read up to (nothing new to read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from auditor.progress import ProgressClock
from hifi.accounting.incarnations import Incarnations
from hifi.audit import Fact


@dataclass(frozen=True, slots=True)
class HeldFact:
    """An audit record held while a partition of its events starts over, as a snapshot keeps it."""

    topic: str
    partition: int
    offset: int
    value: bytes
    headers: list[tuple[str, bytes]]

    @classmethod
    def of(cls, fields: list[Any]) -> HeldFact:
        topic, partition, offset, value, headers = fields
        pairs = [(str(name), bytes(given)) for name, given in headers]
        return cls(str(topic), int(partition), int(offset), bytes(value), pairs)


class Epochs:
    """Which incarnation each poll of a source partition is, and the facts that wait for one."""

    def __init__(
        self, incarnations: Incarnations, clock: ProgressClock, now_ms: Callable[[], int]
    ) -> None:
        self.incarnations = incarnations
        self._clock = clock
        self._now_ms = now_ms
        self.starting_over: set[TopicPartition] = set()  # the worker saw them start over
        self._held: list[Any] = []  # audit records about the events of partitions that wait
        self._waiting: set[TopicPartition] = set()  # the partitions facts were held for
        self._unconfirmed: set[TopicPartition] = set()  # restored, not read since

    def restored(self, tp: TopicPartition) -> None:
        """`tp`'s reading was restored from a snapshot: which topic it reads is not known yet."""
        self._unconfirmed.add(tp)

    def started_over(self, tp: TopicPartition) -> None:
        self.starting_over.add(tp)

    def of_poll(self, tp: TopicPartition, first: Any) -> tuple[int, list[Any]]:
        """The epoch of a poll of `tp` whose first record is `first`, and the held facts to
        apply now (after this poll's entries)."""
        epoch = self.incarnations.epoch(tp.topic, tp.partition)
        read = self._clock.position(tp)
        self._unconfirmed.discard(tp)
        if tp in self.starting_over:
            self.starting_over.discard(tp)
            if read is None:  # nothing of the old topic read: no offset to tell apart
                return epoch, self._due()
            found = self.incarnations.begin(
                tp.topic,
                tp.partition,
                first_ms=first.timestamp,
                now_ms=self._now_ms(),
                read_to=read[0],
            )
        else:
            found = self.incarnations.check(
                tp.topic,
                tp.partition,
                first_offset=first.offset,
                first_ms=first.timestamp,
                read=read,
                highwater=self._clock.highwater(tp),
                now_ms=self._now_ms(),
            )
        if found != epoch:
            self._clock.restart(tp)
        return found, self._due()

    def holds(self, fact: Fact, record: Any) -> bool:
        """Whether `fact` waits for a partition of its events to give its first record."""
        waiting = [
            tp
            for part in fact.slices
            if self._waits(tp := TopicPartition(part.topic, part.partition))
        ]
        if not waiting:
            return False
        self._held.append(record)
        self._waiting.update(waiting)
        return True

    def _waits(self, tp: TopicPartition) -> bool:
        if tp in self.starting_over:
            return True
        read, highwater = self._clock.position(tp), self._clock.highwater(tp)
        if read is not None and highwater is not None and highwater < read[0]:
            return True
        if tp in self._unconfirmed:
            if read is None or highwater == read[0]:
                self._unconfirmed.discard(tp)  # nothing new to read: the same topic
                return False
            return True
        return False

    def due(self) -> list[Any]:
        """The held facts to apply now: none of the partitions they waited for waits still
        (a lagging high watermark caught up), or ones are held again."""
        return self._due()

    def _due(self) -> list[Any]:
        if not self._held or any(map(self._waits, self._waiting)):
            return []
        released, self._held = self._held, []
        self._waiting = set()
        return released

    def drop(self, partitions: set[TopicPartition]) -> list[Any]:
        """Revoked, or the auditor stops: the held facts to apply now (held again if another
        partition of theirs still starts over)."""
        self._unconfirmed -= partitions
        if not self._waiting & partitions:
            self.starting_over -= partitions
            return []
        self.starting_over -= partitions
        self._waiting = set()
        released, self._held = self._held, []
        return released

    def state(self) -> list[list[Any]]:
        return [
            [r.topic, r.partition, r.offset, r.value, [list(h) for h in r.headers or ()]]
            for r in self._held
        ]

    @staticmethod
    def restore(state: Iterable[list[Any]]) -> list[HeldFact]:
        """The facts a snapshot held, to apply with the first ones read."""
        return [HeldFact.of(fields) for fields in state]
