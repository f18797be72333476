"""Replays started from the dashboard: one at a time per destination, with progress, never in the way.

A replay reads the chosen dead letters from NAME.dlq by their coordinates, re-offers them on
NAME.retry_out as fresh events (as `retrier dlq replay` does) and records each acknowledged chunk
in NAME.dlq_replays, so the marks follow the letters that were really replayed even if the
retrier stops half-way. It uses a producer of its own and yields to the event loop after every
chunk: the tiers' re-offers never queue behind a replay of 100,000 letters.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import structlog

from config.destination import Destination
from hifi.errors import HifiError
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import read_at
from hifi.kafka.settings import KafkaSettings
from hifi.redaction import short_error
from retrier.dlq import DeadLetter, replay_with
from retrier.replays import ReplayFilter

log = structlog.get_logger(__name__)

CHUNK_RECORDS = 500
# The index is marked every this many letters: a mark scans the index's columns (tens of ms
# with a million letters, on the event loop), so it is done in a few large steps, not per chunk.
MARK_EVERY_LETTERS = 10_000
_FINISHED_KEPT = 20  # finished jobs still answered by id

Coordinates = Mapping[int, list[int]]  # NAME.dlq partition -> offsets


class MarkReplayed(Protocol):
    """The index's `mark_replayed` of one destination."""

    def __call__(self, coords: Iterable[tuple[int, int]], *, at_ms: int, by: str) -> int: ...


@dataclass
class ReplayJob:
    """One replay and how far it got."""

    id: str
    dest: str
    by: str
    selection: ReplayFilter  # what was chosen: a filter, or one letter
    total: int
    started_ms: int
    replayed: int = 0
    state: str = "running"  # running, done, failed
    error: str | None = None
    finished_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "dest": self.dest,
            "by": self.by,
            "selection": msgspec.to_builtins(self.selection),
            "total": self.total,
            "replayed": self.replayed,
            "state": self.state,
            "error": self.error,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
        }


class Busy(HifiError):
    """A replay of this destination is still running."""


@dataclass
class ReplayJobs:
    """The dashboard's replays; `running()` cancels what is left when the retrier stops."""

    settings: KafkaSettings
    dests: Mapping[str, Destination]
    mark: Callable[[str], MarkReplayed]  # the index's `mark_replayed` of a destination
    chunk_records: int = CHUNK_RECORDS
    _jobs: dict[str, ReplayJob] = field(default_factory=dict)
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def start(
        self, dest: str, coordinates: Coordinates, *, by: str, selection: ReplayFilter
    ) -> ReplayJob:
        running = [
            job for job in self._jobs.values() if job.dest == dest and job.state == "running"
        ]
        if running:
            raise Busy(f"replay {running[0].id} of {dest} is still running")
        total = sum(len(offsets) for offsets in coordinates.values())
        job = ReplayJob(
            id=f"r{next(self._ids)}-{int(time.time())}",
            dest=dest,
            by=by,
            selection=selection,
            total=total,
            started_ms=_now_ms(),
        )
        self._jobs[job.id] = job
        self._forget_old()
        task = asyncio.create_task(self._run(job, coordinates), name=f"replay-{job.id}")
        self._tasks[job.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.id, None))
        log.info(
            "replay_started",
            dest=dest,
            replay=job.id,
            by=by,
            letters=total,
            selection=msgspec.to_builtins(selection),
        )
        return job

    def get(self, job_id: str) -> ReplayJob | None:
        return self._jobs.get(job_id)

    def recent(self, dest: str) -> list[ReplayJob]:
        """This destination's jobs, newest first."""
        return [job for job in reversed(self._jobs.values()) if job.dest == dest]

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ReplayJobs]:
        try:
            yield self
        finally:
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job: ReplayJob, coordinates: Coordinates) -> None:
        dest = self.dests[job.dest]
        mark = self.mark(job.dest)
        try:
            async with open_producer(self.settings) as producer:
                reading = read_at(
                    self.settings, dest.dlq_topic, coordinates, chunk_records=self.chunk_records
                )
                async with contextlib.aclosing(reading) as chunks:
                    unmarked: list[tuple[int, int]] = []
                    async for chunk in chunks:
                        letters = [DeadLetter.from_record(record) for record in chunk]
                        # re-offered, acknowledged, then recorded: the marks follow what was sent
                        await replay_with(producer, dest, letters, by=job.by, filter=job.selection)
                        unmarked.extend(letter.coordinate for letter in letters)
                        job.replayed += len(letters)
                        if len(unmarked) >= MARK_EVERY_LETTERS:
                            mark(unmarked, at_ms=_now_ms(), by=job.by)
                            unmarked = []
                        await asyncio.sleep(0)  # the tiers' work goes first
                    if unmarked:
                        mark(unmarked, at_ms=_now_ms(), by=job.by)
        except asyncio.CancelledError:
            job.state, job.error = "failed", "the retrier stopped during the replay"
            raise
        except (HifiError, TimeoutError) as exc:
            job.state, job.error = "failed", short_error(str(exc))
            log.error("replay_failed", dest=job.dest, replay=job.id, error=job.error)
        else:
            job.state = "done"
            log.info("replay_done", dest=job.dest, replay=job.id, by=job.by, replayed=job.replayed)
        finally:
            job.finished_ms = _now_ms()

    def _forget_old(self) -> None:
        finished = [job for job in self._jobs.values() if job.state != "running"]
        for job in finished[:-_FINISHED_KEPT]:
            del self._jobs[job.id]


def _now_ms() -> int:
    return int(time.time() * 1000)
