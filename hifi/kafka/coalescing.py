"""Records of concurrent writers queued on the producer in one call (a group commit).

A connector with many requests in flight meets their outcomes together: one wake-up of the
event loop reads several replies, and each outcome writes its audit facts. Written one
`append_all` each, every one pays the producer's lock, its patience with Kafka and a waiting
task of its own. `Coalescing` gathers the records of the calls made in one turn of the event
loop, and of those made while the previous group is being queued, and queues them in one
call, in the order the calls were made. Each caller still awaits the acknowledgement of its
own records (the group's), and a failure to write reaches every caller of the group. A
`combine` may rewrite a group's records before they are queued (the audit trail puts the facts
of one origin partition in one record).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence

from hifi.kafka.clients import Record
from hifi.kafka.producing import RecordWriter


class Coalescing:
    """A `RecordWriter` that queues the records of concurrent calls on `writer` in one call."""

    def __init__(
        self, writer: RecordWriter, *, combine: Callable[[list[Record]], list[Record]] | None = None
    ) -> None:
        self._writer = writer
        self._combine = combine
        self._records: list[Record] = []  # the next group's, in the order of the calls
        self._group: asyncio.Future[None] | None = None  # the next group's acknowledgement
        self._queuing: asyncio.Task[None] | None = None
        self._waiting: set[asyncio.Future[object]] = set()  # acknowledgements of queued groups

    async def send_all(self, records: Sequence[Record]) -> object:
        """Write the records; return once they are acknowledged."""
        return await (await self.append_all(records))

    async def append_all(self, records: Sequence[Record]) -> Awaitable[object]:
        """Add the records to the next group; what to await for the group's acknowledgement,
        where a failure to write surfaces."""
        group = self._group
        if group is None:
            group = self._group = asyncio.get_running_loop().create_future()
            group.add_done_callback(_retrieved)
        self._records.extend(records)
        if self._queuing is None:
            self._queuing = asyncio.get_running_loop().create_task(self._queue())
        return asyncio.shield(group)  # one caller cancelled never cancels the others' wait

    async def _queue(self) -> None:
        """Queue the groups one after another until none is left."""
        try:
            while self._group is not None:
                records, group = self._records, self._group
                self._records, self._group = [], None
                try:
                    if self._combine is not None:
                        records = self._combine(records)
                    acknowledged = await self._writer.append_all(records)
                except asyncio.CancelledError:
                    group.cancel()
                    raise
                except Exception as exc:
                    _settle(group, exc)
                    continue
                waiting = asyncio.ensure_future(acknowledged)
                self._waiting.add(waiting)
                waiting.add_done_callback(self._waiting.discard)
                waiting.add_done_callback(functools.partial(_settle_from, group))
        finally:
            self._queuing = None
            if self._group is not None:  # cancelled with a group still to queue
                self._group.cancel()
                self._records, self._group = [], None


def _settle(group: asyncio.Future[None], exc: BaseException) -> None:
    if not group.done():
        group.set_exception(exc)


def _settle_from(group: asyncio.Future[None], task: asyncio.Future[object]) -> None:
    if group.done():
        return
    if task.cancelled():
        group.cancel()
    elif (exc := task.exception()) is not None:
        group.set_exception(exc)
    else:
        group.set_result(None)


def _retrieved(group: asyncio.Future[None]) -> None:
    """A group whose callers all stopped waiting: its failure is theirs, not a stray one."""
    if not group.cancelled():
        group.exception()
