"""What the `PartitionWorker` talks to: the consumer it polls, the handler a daemon supplies, its work.

`GroupConsumer` is the worker's consumer seam, as `kafka.RecordWriter` is the producer's:
`kafka.Consumer` is the real one; tests pass a fake that owns its partitions in memory, so the
lifecycle (revocation, drain, commit watermark, idle exit) runs without a broker.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, Unpack

from aiokafka import TopicPartition

from hifi.kafka.consuming import Rebalance

__all__ = ["ConsumerOpener", "GroupConsumer", "PartitionHandler", "Work", "WorkerOptions"]

DEFAULT_CONFIRM_S = 3.0  # a high watermark below the position this long before the leader is asked
DEFAULT_EVERY_S = 5.0  # the ends of paused partitions are asked this often (hifi.worker.ends)


class GroupConsumer(Protocol):
    """One member of a consumer group, as the worker uses it; failures are hifi errors."""

    def subscribe(self, topics: Sequence[str], **callbacks: Unpack[Rebalance]) -> None:
        """Join the group for `topics`; the callbacks run inside rebalances, revocation first."""

    def assignment(self) -> set[TopicPartition]: ...

    async def getmany(
        self, *, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        """Records (with `.offset`) of unpaused owned partitions; empty after `timeout_ms`."""

    async def commit(self, offsets: dict[TopicPartition, int]) -> None: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    def pause(self, partitions: Iterable[TopicPartition]) -> None: ...

    def resume(self, partitions: Iterable[TopicPartition]) -> None: ...

    def paused(self) -> set[TopicPartition]: ...

    def highwater(self, tp: TopicPartition) -> int | None:
        """The partition's end as of the last fetch (None before one)."""

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The partitions' ends, asked of their leaders now."""

    async def committed_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Where the group reads each partition from: its committed offset, asked of the group's
        coordinator now, or the first offset in the log where it has none."""

    @property
    def session_timeout_s(self) -> float:
        """How long the group keeps this member without a heartbeat."""

    def last_heard_s(self) -> float:
        """`time.monotonic()` of the group coordinator's last answer to this member."""

    def rejoin(self) -> None:
        """Join the group again (revocation, then an assignment from committed offsets)."""


#: Opens the worker's consumer for one `run()` and closes it when the block exits.
ConsumerOpener = Callable[[], AbstractAsyncContextManager[GroupConsumer]]


@dataclass(frozen=True, slots=True)
class Work:
    """One unit of work to run as a task, and the records whose outcome it decides.

    `job` may return an awaitable: what is left to wait for once it no longer needs its slot
    (the connector returns the broker's acknowledgement of a full batch's audit facts, so the
    next request starts while it waits). The records are done once that is done too.
    """

    job: Coroutine[Any, Any, Awaitable[None] | None]
    offsets: Mapping[TopicPartition, Sequence[int]]


class PartitionHandler(abc.ABC):
    """What a daemon does with its records; the worker calls it from its event loop only.

    How a daemon uses the worker (`hifi/worker/lifecycle.py`):

        class Auditing(PartitionHandler):
            def take(self, tp, records): ...         # parse, keep what is to be written
            def next_work(self, *, poll_open): ...   # Work(job=self._write(...), offsets=...)

        worker = PartitionWorker(settings, WorkerOptions(group_id="g", max_in_flight=4, ...))
        await worker.run(Auditing(...), topics=[...])  # worker.request_stop() from a signal
    """

    @abc.abstractmethod
    def take(self, tp: TopicPartition, records: list[Any]) -> int | None:
        """Take in one partition's records of a poll.

        Return None when every record was taken, or the offset to read `tp` from again: the
        records from there on are not taken (the worker seeks back; they come again).
        """

    async def prepare(self, tp: TopicPartition, records: list[Any]) -> list[Any] | None:
        """What `take` gets of one partition's records of a poll: them as they are, or (a
        destination that decodes them) each with its value decoded, one for one. It may wait
        (a schema fetched); a rebalance in that wait drops the rest of the poll. None: not now
        (a source it needs is down; `room` or `held` pauses intake meanwhile): the worker seeks
        back, and the records come again."""
        return records

    @abc.abstractmethod
    def next_work(self, *, poll_open: bool) -> Work | None:
        """The next unit to start now, or None. `poll_open`: more records of the poll being
        taken in are still to come, so work that would grow with them can wait."""

    def room(self) -> int:
        """How many records the next poll may bring; 0 pauses every partition."""
        return 500

    def assigned(self, partitions: set[TopicPartition]) -> Mapping[TopicPartition, int]:
        """A rebalance gave this member `partitions`; where to read some of them from instead
        of the group's committed offsets (the auditor keeps its audit-topic positions itself).
        An exception stops the worker with it."""
        return {}

    def rereads(self) -> set[TopicPartition]:
        """Of the positions `assigned` gave, those on a record the handler read before (to
        check it is the same topic): a partition whose end is not past it started over."""
        return set()

    def held(self, owned: set[TopicPartition]) -> set[TopicPartition]:
        """Owned partitions that must not be fetched now (the rest are resumed)."""
        return set()

    @property
    def busy(self) -> bool:
        """True while work is taken in but not started, or records wait: the daemon is not idle."""
        return False

    def drop(self, partitions: set[TopicPartition]) -> None:
        """Forget work not yet started for `partitions`: revoked, or the worker is stopping."""
        return

    def after_commit(self, lag_records: Mapping[TopicPartition, int]) -> None:
        """Periodic duties after a commit; `lag_records`: per owned partition, its end minus the
        committed offset, true while it is paused too (`hifi.worker.ends`)."""
        return

    def started_over(self, tp: TopicPartition) -> None:
        """`tp` started over (its topic was deleted and created again): the records taken from
        it so far still get their work; the next records `take` gets from it are the new
        topic's, from its beginning, and name other events than the old offsets did."""
        return


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How a daemon's worker consumes, bounds its work, commits and stops."""

    group_id: str
    max_in_flight: int  # units of work running at once (the ceiling of a moving `limit`)
    commit_interval_s: float
    shutdown_timeout_s: float  # drain deadline on revocation and on stop
    commit_every_records: int | None = None  # commit sooner once this many outcomes are new
    until_idle_s: float | None = None
    # a high watermark below what was read this long, then the leader is asked (hifi.worker.restarts)
    started_over_confirm_s: float = DEFAULT_CONFIRM_S
    ends_every_s: float = DEFAULT_EVERY_S  # paused partitions' ends are asked this often
    consumer_options: Mapping[str, Any] = field(default_factory=dict)
    log_context: Mapping[str, str] = field(default_factory=dict)
    limit: Callable[[], int] | None = None  # the bound now, when it moves (adaptive concurrency)
    max_settling: int | None = None  # units out of their slot, awaiting an ack; None: max_in_flight
