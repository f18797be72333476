"""Incarnations of source partitions: a topic deleted and created again (or a cluster replaced)
starts its offsets again at 0, so `topic/partition/offset` names a different event than before.

The auditor notices it where it reads: a poll of a partition that starts below the offset it
had read up to, with a record written after the last one it had read (a replay after a restart
re-reads older records; a new incarnation's are newer), or a high watermark below that offset.
Each incarnation of a partition has an epoch (0 for the first the auditor knew, and for every
archive written before epochs existed) and the Kafka time from which it counts. An origin is
then `topic/partition/offset` within an epoch: the ledgers key their bitmaps by `key()` (the
topic as it is in epoch 0, `topic@epoch` after), the archive has a `topic_epoch` column,
and the reconciliation joins on it.

An audit fact names no epoch: a slice belongs to the newest incarnation that began at or before
the time the node took its events in (its first event's `taken_ms`, else the fact's time), as
every record of the old incarnation was taken before the topic was deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from hifi.audit import Fact

log = structlog.get_logger(__name__)

SEPARATOR = "@"  # never in a Kafka topic name ([A-Za-z0-9._-]): `orders@1/0/17` reads plainly


def key(topic: str, epoch: int) -> str:
    """The topic as the ledgers key its bitmaps: itself in epoch 0."""
    return topic if epoch == 0 else f"{topic}{SEPARATOR}{epoch}"


def split(keyed: str) -> tuple[str, int]:
    """`key()` undone: (topic, epoch)."""
    topic, _, epoch = keyed.partition(SEPARATOR)
    return topic, int(epoch) if epoch else 0


@dataclass(frozen=True, slots=True)
class Incarnation:
    epoch: int
    from_ms: int  # the Kafka time of its first record the auditor read
    noticed_ms: int  # when the auditor noticed it (wall clock)
    known_offset: int  # the offset the previous incarnation had been read up to


class Incarnations:
    """Per source partition, its incarnations since the auditor's archive began; oldest first."""

    def __init__(self) -> None:
        self._by_partition: dict[tuple[str, int], list[Incarnation]] = {}

    def epoch(self, topic: str, partition: int) -> int:
        found = self._by_partition.get((topic, partition))
        return found[-1].epoch if found else 0

    def epoch_at(self, topic: str, partition: int, taken_ms: int) -> int:
        """The epoch of events of `topic/partition` taken in at `taken_ms`."""
        for incarnation in reversed(self._by_partition.get((topic, partition), ())):
            if incarnation.from_ms <= taken_ms:
                return incarnation.epoch
        return 0

    def epochs_of(self, fact: Fact) -> list[int]:
        """The epoch of each slice of `fact` (empty while no partition was ever re-created)."""
        if not self._by_partition:
            return []
        return [
            self.epoch_at(part.topic, part.partition, min(part.taken_ms) or fact.outcome_ms)
            if part.taken_ms
            else self.epoch_at(part.topic, part.partition, fact.outcome_ms)
            for part in fact.slices
        ]

    def check(
        self,
        topic: str,
        partition: int,
        *,
        first_offset: int,
        first_ms: int,
        read: tuple[int, int | None] | None,
        highwater: int | None,
        now_ms: int,
    ) -> int:
        """The epoch of a poll of `topic/partition` starting at `first_offset` (written at
        `first_ms`), given how far it was read before (`read`: next offset, last Kafka time):
        a new one, logged, when the partition was deleted and created again."""
        current = self.epoch(topic, partition)
        if read is None:
            return current
        next_offset, last_ms = read
        if first_offset >= next_offset:
            return current
        newer = last_ms is not None and first_ms > last_ms
        shrunk = highwater is not None and highwater < next_offset
        if not (newer or shrunk):
            return current  # a replay from the committed offset: the same records again
        return self.begin(topic, partition, first_ms=first_ms, now_ms=now_ms, read_to=next_offset)

    def begin(self, topic: str, partition: int, *, first_ms: int, now_ms: int, read_to: int) -> int:
        """A new incarnation of `topic/partition` from a record written at `first_ms` (the
        previous one read up to `read_to`); its epoch, logged."""
        incarnation = Incarnation(self.epoch(topic, partition) + 1, first_ms, now_ms, read_to)
        self._by_partition.setdefault((topic, partition), []).append(incarnation)
        log.warning(
            "source_partition_recreated",
            topic=topic,
            partition=partition,
            epoch=incarnation.epoch,
            read_up_to=read_to,
            hint="its events count as new events (origins are per epoch), not as duplicates",
        )
        return incarnation.epoch

    def view(self) -> list[dict[str, Any]]:
        """For `/status`: every partition that was re-created, with its current epoch."""
        return [
            {
                "topic": topic,
                "partition": partition,
                "epoch": found[-1].epoch,
                "since_ms": found[-1].from_ms,
                "noticed_ms": found[-1].noticed_ms,
                "previous_read_up_to": found[-1].known_offset,
            }
            for (topic, partition), found in sorted(self._by_partition.items())
        ]

    def state(self, only: tuple[str, int] | None = None) -> list[list[Any]]:
        """What a snapshot keeps: of every partition, or of `only` (a share's)."""
        return [
            [topic, partition, i.epoch, i.from_ms, i.noticed_ms, i.known_offset]
            for (topic, partition), found in self._by_partition.items()
            if only is None or only == (topic, partition)
            for i in found
        ]

    def restore(self, state: Iterable[list[Any]]) -> None:
        self._by_partition = {}
        self.add(state)

    def add(self, state: Iterable[list[Any]]) -> None:
        """`restore` for some partitions (a share's), keeping what is known of the others."""
        for topic, partition, epoch, from_ms, noticed_ms, known in state:
            self._by_partition.setdefault((str(topic), int(partition)), []).append(
                Incarnation(int(epoch), int(from_ms), int(noticed_ms), int(known))
            )
