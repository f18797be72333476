"""The epoch of each poll of a source partition, while the auditor runs and across its runs.

Two ways tell the auditor that a source partition started over (its topic deleted and created
again, `auditor.incarnations`): the worker sees it while the auditor runs
(`PartitionHandler.started_over`, `hifi.worker_restarts`), or the auditor sees a poll start below
where it had read, with newer records or a high watermark below that offset (across runs). The
first records read after either begin a new incarnation at their Kafka time.

An audit fact names no epoch: its slices belong to the incarnation that began at or before the
time its events were taken in. So while a partition the worker saw start over has not given
its first record yet, the facts about its events are held, then applied with that epoch known:
none of the new topic's events counts against the old topic's offsets. Held facts are in the
snapshot, as their records are committed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from auditor.incarnations import Incarnations
from auditor.progress import ProgressClock
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
        self._held: list[Any] = []  # audit records about their events

    def started_over(self, tp: TopicPartition) -> None:
        self.starting_over.add(tp)

    def of_poll(self, tp: TopicPartition, first: Any) -> tuple[int, list[Any]]:
        """The epoch of a poll of `tp` whose first record is `first`, and the held facts to
        apply now (after this poll's entries)."""
        epoch = self.incarnations.epoch(tp.topic, tp.partition)
        read = self._clock.position(tp)
        if tp in self.starting_over:
            self.starting_over.discard(tp)
            released, self._held = self._held, []
            if read is None:
                return epoch, released  # nothing of the old topic read: no offset to tell apart
            found = self.incarnations.begin(
                tp.topic,
                tp.partition,
                first_ms=first.timestamp,
                now_ms=self._now_ms(),
                read_to=read[0],
            )
        else:
            released = []
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
        return found, released

    def holds(self, fact: Fact, record: Any) -> bool:
        """Whether `fact` waits for a partition of its events to give its first record."""
        starting = self.starting_over
        if starting and any(
            TopicPartition(part.topic, part.partition) in starting for part in fact.slices
        ):
            self._held.append(record)
            return True
        return False

    def drop(self, partitions: set[TopicPartition]) -> list[Any]:
        """Revoked, or the auditor stops: the held facts to apply now (held again if another
        partition of theirs still starts over)."""
        if not self.starting_over & partitions:
            return []
        self.starting_over -= partitions
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
