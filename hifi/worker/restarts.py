"""Partitions that start over under a running worker: a topic deleted and created again under its
name (or a cluster replaced) begins its offsets again at 0, below where the member had read.

The worker notices it in one of two ways (`vocabulary.StartedOver`):

- a poll's records of a partition begin below the offset the member had read up to
  (`OFFSETS_WENT_BACK`). On Kafka the fetch beyond the new end is answered OFFSET_OUT_OF_RANGE
  and aiokafka resets the position to the earliest offset (hifi's consumers reset to
  `earliest`) without an error reaching hifi: the first records of the new topic arrive.
  Nothing else moves a position back: the worker's own seeks are accounted for, and a
  rebalance starts the reading over (`forget`).
- the partition's high watermark (from the last fetch response) stays below that offset for
  `confirm_s`, and the end the leader gives when asked is below it too (`END_BELOW_POSITION`).
  A broker that answers a fetch beyond the end with no error and no records (Tansu) would
  otherwise keep the member waiting there for good. A high watermark is None before the first
  fetch and a new leader's can lag behind for a moment: the wait and the question to the
  leader keep those from looking like a new topic.

Either way one warning line says so (`partition_started_over`), the handler is told
(`PartitionHandler.started_over`) and the partition is paused until the records taken from the
old topic have their outcome (they are not dropped). Then its commit watermark starts over
(`OffsetTracker.restart`: its new beginning is committed over the old offset) and the member
reads it from its new beginning.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from hifi.errors import HifiError
from hifi.offsets import OffsetTracker
from hifi.vocabulary import StartedOver
from hifi.worker.gaps import OffsetGaps
from hifi.worker.seams import GroupConsumer, PartitionHandler

END_QUERY_TIMEOUT_S = 5.0  # asking a leader for a partition's end: longer, and ask again later
CHECK_EVERY_S = 0.1  # the high watermarks are looked at this often at most (not every poll)


@dataclass(frozen=True, slots=True)
class StartOver:
    """One time a partition was seen to start over."""

    cause: StartedOver
    read_up_to: int  # the offset the member had read the old topic up to
    starts_at: int  # where it reads the new one from
    noticed_ms: int  # wall clock


@dataclass(slots=True)
class StartOvers:
    """Per partition, how many times it started over and the last one: kept by the worker
    across its runs, shown in the daemons' `/status`."""

    seen: dict[TopicPartition, tuple[int, StartOver]] = field(default_factory=dict)
    waiting: Mapping[TopicPartition, StartOver] = field(default_factory=dict)  # the run's

    def view(self) -> list[dict[str, Any]]:
        waiting = self.waiting
        return [
            {
                "partition": f"{tp.topic}/{tp.partition}",
                "times": times,
                "cause": str(last.cause),
                "noticed_ms": last.noticed_ms,
                "read_up_to": last.read_up_to,
                "starts_at": last.starts_at,
                "finishing_old_records": tp in waiting,
            }
            for tp, (times, last) in sorted(self.seen.items())
        ]


@dataclass(eq=False, slots=True)
class RestartWatch:
    """Per owned partition of one run: how far the member read it, and whether it started over."""

    _consumer: GroupConsumer
    _handler: PartitionHandler
    _tracker: OffsetTracker
    _history: StartOvers
    _confirm_s: float
    _log: Any
    # the next offset, as this member read it
    _read_to: dict[TopicPartition, int] = field(default_factory=dict, init=False)
    # the handler read the record there before
    _rereads: set[TopicPartition] = field(default_factory=set, init=False)
    # loop time the end was seen below it
    _suspected: dict[TopicPartition, float] = field(default_factory=dict, init=False)
    # the leader did not say its end
    _unanswered: set[TopicPartition] = field(default_factory=set, init=False)
    _next_check_s: float = field(default=0.0, init=False)  # loop time of the next look
    # the old topic's records finishing
    waiting: dict[TopicPartition, StartOver] = field(default_factory=dict, init=False)

    # jumps past offsets not read (`hifi.worker.gaps`)
    _gaps: OffsetGaps = field(init=False)

    def __post_init__(self) -> None:
        self._history.waiting = self.waiting
        self._gaps = OffsetGaps(self._log)

    def before_gap(self, tp: TopicPartition, records: list[Any]) -> tuple[list[Any], int | None]:
        """A poll's records of `tp` to take, and where to read it again from (None: nowhere):
        `OffsetGaps.cut` from where the member read it."""
        return self._gaps.cut(tp, records, self._read_to.get(tp))

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Assigned or revoked: the next fetch starts from the committed offset."""
        self._gaps.forget(partitions)
        for tp in partitions:
            self._read_to.pop(tp, None)
            self._suspected.pop(tp, None)
            self.waiting.pop(tp, None)
        self._rereads -= partitions

    def skip(self, tp: TopicPartition, first_offset: int) -> bool:
        """Whether a poll's records of `tp`, from `first_offset`, are not to be taken now: the
        partition waits to start over, or they begin a new topic (noticed here)."""
        if tp in self.waiting:
            return True  # fetched before the pause: read again from the new beginning
        read_to = self._read_to.get(tp)
        if read_to is None or first_offset >= read_to:
            return False
        self._notice(tp, StartedOver.OFFSETS_WENT_BACK, read_to, starts_at=first_offset)
        return True

    def took(self, tp: TopicPartition, next_offset: int, *, reread: bool = False) -> None:
        """The member read `tp` up to `next_offset` (or seeks back to it); `reread`: the handler
        read the record at `next_offset` before, so the partition's end is past it."""
        self._read_to[tp] = next_offset
        if reread:
            self._rereads.add(tp)
        else:
            self._rereads.discard(tp)

    async def check(self, now_s: float) -> None:
        """Notice partitions whose end stayed below what was read (every `CHECK_EVERY_S`); start
        over those whose old records all have their outcome."""
        if self.waiting:
            for tp in [tp for tp in self.waiting if not self._tracker.outstanding(tp)]:
                self._start(tp)
        if now_s < self._next_check_s:
            return
        self._next_check_s = now_s + CHECK_EVERY_S
        owned = self._consumer.assignment()  # aiokafka asserts on a partition it does not own
        for tp, read_to in list(self._read_to.items()):
            if self._read_to.get(tp) != read_to or tp not in owned:
                continue  # revoked while the leader was asked about another partition
            highwater = self._consumer.highwater(tp)
            read_to += tp in self._rereads  # the end is past the record read again
            if tp in self.waiting or highwater is None or highwater >= read_to:
                self._suspected.pop(tp, None)
                continue
            since_s = self._suspected.setdefault(tp, now_s)
            if now_s - since_s < self._confirm_s:
                continue
            end = await self._end_offset(tp)
            if self._read_to.get(tp, -1) + (tp in self._rereads) != read_to or tp in self.waiting:
                continue  # a rebalance or a poll ran meanwhile: look again next time
            if end is not None and end < read_to:
                self._notice(tp, StartedOver.END_BELOW_POSITION, read_to, starts_at=0)
            else:
                self._suspected[tp] = now_s  # the leader says otherwise: wait, then ask again

    async def _end_offset(self, tp: TopicPartition) -> int | None:
        try:
            async with asyncio.timeout(END_QUERY_TIMEOUT_S):
                found = await self._consumer.end_offsets([tp])
        except (HifiError, TimeoutError) as exc:
            if tp not in self._unanswered:  # once until it answers: a deleted topic may not
                self._unanswered.add(tp)
                name = f"{tp.topic}/{tp.partition}"
                self._log.info("end_offset_unknown", partition=name, error=str(exc) or "timeout")
            return None
        self._unanswered.discard(tp)
        return found.get(tp)

    def _notice(
        self, tp: TopicPartition, cause: StartedOver, read_to: int, *, starts_at: int
    ) -> None:
        noticed = StartOver(cause, read_to, starts_at, int(time.time() * 1000))
        self.waiting[tp] = noticed
        self._suspected.pop(tp, None)
        times = self._history.seen.get(tp, (0, noticed))[0] + 1
        self._history.seen[tp] = (times, noticed)
        self._log.warning(
            "partition_started_over",
            topic=tp.topic,
            partition=tp.partition,
            cause=str(cause),
            read_up_to=read_to,
            starts_at=starts_at,
            finishing=self._tracker.outstanding(tp),
            hint="its topic was deleted and created again: its records from the new beginning"
            " are new events; the old records taken in still get their outcome first",
        )
        self._handler.started_over(tp)

    def _start(self, tp: TopicPartition) -> None:
        noticed = self.waiting.pop(tp)
        self._tracker.restart(tp, noticed.starts_at)
        self._consumer.seek(tp, noticed.starts_at)
        self._read_to[tp] = noticed.starts_at
