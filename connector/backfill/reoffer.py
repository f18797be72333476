"""`connector backfill`: re-offer a time range of a destination's source records on NAME.retry_out, resumably.

Each partition is read from the first record at or after FROM (`connector.backfill.positions`) up to the
first record at or after TO, or up to the end offset it had when the backfill began. Selected
records are written to NAME.retry_out with their key and value unchanged and the headers of a
fresh re-offer (`hifi.headers.reoffer_headers`): the running connector delivers them as it
delivers a retried event, with their original ids and origins. Writes are acknowledged
(acks=all) chunk by chunk, and the checkpoint (`connector.backfill.checkpoint`) is written only after
the broker acknowledged everything before it: at least every 10,000 records scanned or
`checkpoint_every_s`. A stop request (SIGTERM, SIGINT) stops reading, lets the write in flight
finish, writes the checkpoint and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import structlog
from aiokafka import TopicPartition

from config.destination import Destination
from config.topics import ensure_destination_topics
from connector.backfill import checkpoint as checkpoints
from connector.backfill import positions
from connector.backfill.checkpoint import Checkpoint, Cursor
from connector.backfill.selection import Selection
from connector.backfill.views import ShowProgress
from connector.defaults import CHECKPOINT_EVERY_RECORDS, CHECKPOINT_EVERY_S
from connector.pacing import Pacer
from hifi.cli import parse_time
from hifi.errors import BrokerUnavailable, ConfigError, HifiError
from hifi.headers import reoffer_headers
from hifi.kafka.consuming import Consumer
from hifi.kafka.producing import Producer, open_producer
from hifi.kafka.settings import KafkaSettings
from hifi.worker.gaps import OffsetGaps

log = structlog.get_logger(__name__)

_FETCH_WAIT_MS = 500
_FETCH_RECORDS = 1000  # records taken from the consumer per fetch, at most
_IDLE_FETCHES = 60  # a scan that gets nothing in this many fetches (30 s) fails
_PRODUCER_BATCH_BYTES = 1024 * 1024
MAX_CHUNK_EVENTS = 500  # re-offers written (and awaited) together at most
_CHUNKS_PER_S = 4  # with a rate: about this many writes a second, so a stop waits little


class Status(StrEnum):
    FINISHED = "finished"  #: every partition read to the end of the range
    ALREADY_FINISHED = "already_finished"  #: the checkpoint says so; nothing was done
    STOPPED = "stopped"  #: a stop request ended the run; the checkpoint resumes it


@dataclass(frozen=True, slots=True)
class BackfillRequest:
    """What to backfill, as the command line gives it."""

    dest: Destination
    from_ms: int
    to_ms: int
    key: str  # identifies the backfill: destination, range and selection (`backfill_key`)
    selection: Selection
    checkpoint_path: Path
    rate_per_s: float | None = None
    checkpoint_every_s: float = CHECKPOINT_EVERY_S
    restart: bool = False  # ignore (and replace) a checkpoint of the same backfill
    dry_run: bool = False  # scan and count; write nothing


@dataclass(frozen=True, slots=True)
class BackfillResult:
    status: Status
    state: Checkpoint
    resumed: bool  # this run started from a checkpoint
    reoffered_now: int  # re-offered by this run
    run_s: float  # this run's seconds
    stopped_by: str | None = None  # the signal that stopped it


def time_key(text: str, *, flag: str) -> str:
    """How a time argument names a backfill: its instant when absolute, its text when relative
    ("2h" ago means another instant at each run; the checkpoint keeps the first)."""
    if parse_time(text, now_ms=0, flag=flag) == parse_time(text, now_ms=1, flag=flag):
        return str(parse_time(text, now_ms=0, flag=flag))
    return text.strip()


def backfill_key(dest: str, from_key: str, to_key: str, selection: str) -> str:
    """A short hash naming one backfill: the same arguments, the same checkpoint."""
    identity = f"{dest}\n{from_key}\n{to_key}\n{selection}".encode()
    return hashlib.sha256(identity).hexdigest()[:16]


def chunk_events(rate_per_s: float | None) -> int:
    """Re-offers per write: 500 unpaced; with a rate, a quarter second's worth (1 to 500)."""
    if rate_per_s is None:
        return MAX_CHUNK_EVENTS
    return max(1, min(MAX_CHUNK_EVENTS, int(rate_per_s / _CHUNKS_PER_S)))


class _Stopped(Exception):
    """A stop request came before the next write."""


class Backfill:
    """One backfill run: `prepare()` loads or plans its state, `run()` scans and re-offers."""

    def __init__(self, settings: KafkaSettings, request: BackfillRequest) -> None:
        self._settings = settings
        self._request = request
        self._stop = asyncio.Event()
        self.stopped_by: str | None = None
        self._state: Checkpoint | None = None
        self._resumed = False
        self._chunk_events = chunk_events(request.rate_per_s)
        self._pacer = Pacer(request.rate_per_s, burst=self._chunk_events)
        self._reoffered_now = 0
        self._scanned_since_save = 0
        self._saved_s = 0.0
        self._run_started_s = 0.0
        self._run_s_before = 0.0

    @property
    def state(self) -> Checkpoint:
        """The backfill's state (after `prepare()`)."""
        assert self._state is not None, "prepare() first"
        return self._state

    @property
    def resumed(self) -> bool:
        """`prepare()` found a checkpoint of this backfill and resumes from it."""
        return self._resumed

    def request_stop(self, why: str) -> None:
        """Stop reading; the write in flight finishes and the checkpoint is written. Safe to call
        from a signal handler."""
        if self.stopped_by is None:
            self.stopped_by = why
        self._stop.set()

    async def prepare(self) -> Checkpoint:
        """The state to run from: the checkpoint of the same backfill, else a new plan (saved
        at once, so a run killed before its first checkpoint resumes the same plan)."""
        request = self._request
        self._run_started_s = self._saved_s = time.monotonic()
        if not request.dry_run and not request.restart:
            saved = checkpoints.load(request.checkpoint_path)
            if saved is not None:
                if saved.key != request.key:
                    raise ConfigError(
                        f"checkpoint {request.checkpoint_path} belongs to another backfill"
                        f" (destination {saved.dest}, selection {saved.selection}); give another"
                        " --checkpoint, or --restart to replace it"
                    )
                self._resumed = True
                self._state = saved
                self._run_s_before = saved.run_s
                return saved
        async with positions.reader(self._settings) as consumer:
            state = self._state = await plan(consumer, request)
        if not request.dry_run:
            await self._save()
        return state

    async def run(self, show: ShowProgress) -> BackfillResult:
        """Scan the prepared state's open partitions and re-offer what is selected."""
        state = self.state
        if state.finished:
            return BackfillResult(Status.ALREADY_FINISHED, state, self._resumed, 0, 0.0)
        try:
            async with self._writer() as producer, positions.reader(self._settings) as consumer:
                await self._scan(consumer, producer, show)
        except _Stopped:
            pass
        except HifiError:
            if not self._request.dry_run:  # cursors move only past acknowledged writes
                await self._save()
            raise
        stopped = self._stop.is_set() and not all(c.done for c in state.cursors)
        state.finished = not stopped
        run_s = time.monotonic() - self._run_started_s
        if not self._request.dry_run:
            await self._save()
        show(state)
        status = Status.STOPPED if stopped else Status.FINISHED
        return BackfillResult(
            status, state, self._resumed, self._reoffered_now, run_s, self.stopped_by
        )

    @contextlib.asynccontextmanager
    async def _writer(self) -> AsyncIterator[Producer | None]:
        """The producer of the re-offers (acks=all); None on a dry run, which writes nothing."""
        if self._request.dry_run:
            yield None
            return
        await ensure_destination_topics(self._settings, self._request.dest)
        async with open_producer(
            self._settings, linger_ms=0, max_batch_size=_PRODUCER_BATCH_BYTES
        ) as producer:
            yield producer

    async def _scan(
        self, consumer: Consumer, producer: Producer | None, show: ShowProgress
    ) -> None:
        state = self.state
        reading = {c.tp: c for c in state.cursors if not c.done}
        for cursor in list(reading.values()):
            if cursor.next >= cursor.stop:
                cursor.done = True
                del reading[cursor.tp]
        if not reading:
            return
        consumer.assign(list(reading))
        for tp, cursor in reading.items():
            consumer.seek(tp, cursor.next)
        idle_fetches = 0
        gaps = OffsetGaps(log)  # a batch a fetch left out is read again, not passed over
        while reading and not self._stop.is_set():
            fetched = await consumer.getmany(timeout_ms=_FETCH_WAIT_MS, max_records=_FETCH_RECORDS)
            await self._take_poll(consumer, fetched, reading, gaps, producer, show)
            await self._close_ended(consumer, reading, fetched)
            idle_fetches = 0 if fetched else idle_fetches + 1
            if idle_fetches > _IDLE_FETCHES:
                raise BrokerUnavailable(
                    f"kafka {self._settings.bootstrap}: no record of"
                    f" {_names(list(reading))} came back for {_IDLE_FETCHES * _FETCH_WAIT_MS // 1000}"
                    " s although they have records left in range; run the backfill again"
                )
            show(state)
            await self._maybe_save()

    async def _take_poll(
        self,
        consumer: Consumer,
        fetched: dict[TopicPartition, list[Any]],
        reading: dict[TopicPartition, Cursor],
        gaps: OffsetGaps,
        producer: Producer | None,
        show: ShowProgress,
    ) -> None:
        """Take a poll's records of the partitions read, up to a jump past an offset not read
        (then read again from it, `hifi.worker.gaps`)."""
        for tp, records in fetched.items():
            if tp in reading and records:
                cursor = reading[tp]
                taken, again = gaps.cut(tp, records, cursor.next)
                if taken:
                    await self._take(cursor, taken, producer, show)
                if again is not None and not cursor.done:
                    consumer.seek(tp, again)

    async def _close_ended(
        self,
        consumer: Consumer,
        reading: dict[TopicPartition, Cursor],
        fetched: dict[TopicPartition, list[Any]],
    ) -> None:
        """Stop reading partitions that reached the end of the range."""
        for tp, cursor in list(reading.items()):
            if not cursor.done and not fetched.get(tp):
                cursor.done = await consumer.position(tp) >= cursor.stop
            if cursor.done:
                consumer.pause([tp])
                del reading[tp]

    async def _take(
        self,
        cursor: Cursor,
        records: Sequence[Any],
        producer: Producer | None,
        show: ShowProgress,
    ) -> None:
        """Scan one partition's fetched records; re-offer the selected ones chunk by chunk, each
        acknowledged before the cursor moves past it."""
        selection, to_ms, tp = self._request.selection, self.state.to_ms, cursor.tp
        chunk: list[Any] = []
        scanned = last_offset = 0
        for record in records:
            if record.offset < cursor.next:
                continue
            if record.offset >= cursor.stop or record.timestamp >= to_ms:
                cursor.done = True
                break
            scanned += 1
            last_offset = record.offset
            if selection.wants(tp, record.offset):
                chunk.append(record)
                if len(chunk) >= self._chunk_events:
                    await self._advance(cursor, last_offset, scanned, chunk, producer)
                    chunk, scanned = [], 0
                    show(self.state)
        if scanned:
            await self._advance(cursor, last_offset, scanned, chunk, producer)

    async def _advance(
        self,
        cursor: Cursor,
        last_offset: int,
        scanned: int,
        chunk: list[Any],
        producer: Producer | None,
    ) -> None:
        """Re-offer `chunk`, then move the cursor past `last_offset`."""
        reoffered = await self._reoffer(chunk, producer) if chunk else 0
        cursor.advance(last_offset, scanned=scanned, selected=len(chunk), reoffered=reoffered)
        self._scanned_since_save += scanned
        await self._maybe_save()

    async def _reoffer(self, records: list[Any], producer: Producer | None) -> int:
        """Write `records` to NAME.retry_out and await the broker's acknowledgement."""
        if self._stop.is_set():
            raise _Stopped
        if producer is None:
            return 0
        if not await self._pacer.take(len(records), self._stop):
            raise _Stopped
        dest = self._request.dest
        await producer.send_all(
            [
                (dest.retry_out_topic, r.key, r.value, reoffer_headers(r, dest=dest.name))
                for r in records
            ]
        )
        self._reoffered_now += len(records)
        return len(records)

    async def _maybe_save(self) -> None:
        if self._request.dry_run:
            return
        due = time.monotonic() - self._saved_s >= self._request.checkpoint_every_s
        if due or self._scanned_since_save >= CHECKPOINT_EVERY_RECORDS:
            await self._save()

    async def _save(self) -> None:
        state = self.state
        now_s = time.monotonic()
        state.run_s = self._run_s_before + now_s - self._run_started_s
        await asyncio.to_thread(checkpoints.save, self._request.checkpoint_path, state)
        self._saved_s = now_s
        self._scanned_since_save = 0


async def plan(consumer: Consumer, request: BackfillRequest) -> Checkpoint:
    """A new backfill's state: per partition with something selected, the offsets from the
    first record at or after FROM to the first at or after TO (or the end offset now).

    The scan still stops at the first record at or after TO, which comes no later: the search
    for TO only narrows the range, for the progress and the dry run.
    """
    selection = request.selection
    partitions = await positions.source_partitions(consumer, request.dest)
    bounds = {tp: selection.bounds(tp) for tp in partitions}
    wanted = [tp for tp in partitions if bounds[tp] is not None]
    starts = await positions.offsets_at(consumer, wanted, request.from_ms)
    stops = await positions.offsets_at(consumer, wanted, request.to_ms)
    cursors: list[Cursor] = []
    for tp in wanted:
        first, after_last = bounds[tp] or (0, 0)
        start = max(starts[tp].offset, first)
        stop = max(start, min(starts[tp].end, stops[tp].offset, after_last))
        cursors.append(Cursor(tp.topic, tp.partition, start, stop, start, done=start >= stop))
    return Checkpoint(
        key=request.key,
        dest=request.dest.name,
        from_ms=request.from_ms,
        to_ms=request.to_ms,
        selection=selection.digest,
        source=selection.source,
        listed=selection.listed,
        started_ms=int(time.time() * 1000),
        cursors=cursors,
    )


def _names(partitions: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}/{tp.partition}" for tp in partitions)
