"""Watching the auditor drain a backlog: its metrics and RSS from ready until everything is read and archived."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from bench.auditor_load import Timeline
from bench.auditor_process import AuditorProcess, Scrape

SCRAPE_S = 0.5
SNAPSHOTS = "auditor-hifi.auditor--*.snapshot"  # the shares' accounts, in the archive's _state


@dataclass(frozen=True)
class Drain:
    """The auditor reading one backlog."""

    events: int
    facts: int
    produce_s: float
    drain_s: float
    events_per_s: float
    archived_s: float | None  # ready to every row in closed files; None if not seen in time
    rss_ready_mb: float
    peak_rss_mb: float
    max_tracked_events: int
    tracked_at_end: int
    time_past: int  # events counted in another minute than their own (must be 0)
    snapshot_mb_max: float  # the accounts' state as the auditor serializes it
    ahead_of_clock_s_max: float  # how far the read position ran ahead of the wall clock
    cores: tuple[float, float]  # (ours, others) while the auditor ran: see `machine.CpuWatch`
    # first record read to last, without the first scrape's records (as the connector's rate
    # runs from its first receipt): what the auditor takes in once it reads
    intake_events_per_s: float
    timeline: list[dict[str, float]]


class Watch:
    """Scrapes the auditor from ready until it has read (and archived) the backlog."""

    def __init__(
        self,
        auditor: AuditorProcess,
        archive: Path,
        topic: str,
        audit_topic: str,
        *,
        partitions: int,
        events: int,
        facts: int,
        timeline: Timeline | None,
        roll_s: float,
        timeout_s: float,
        scrape_s: float = SCRAPE_S,
    ) -> None:
        self.auditor, self._archive = auditor, archive
        self._scrape_s = scrape_s
        self._intake_first: tuple[float, int] | None = None  # (at_s, records) first seen
        self._intake_done_s: float | None = None
        self._intake_none_s: float | None = None  # the last scrape with no record taken
        self._partitions, self._roll_s, self._timeout_s = partitions, roll_s, timeout_s
        self.topic, self.audit_topic = topic, audit_topic
        self.events, self.facts, self._timeline = events, facts, timeline
        self.ready_at = time.monotonic()
        self.read_at: float | None = None
        self.archived_at: float | None = None
        self.last: Scrape | None = None
        self.snapshot_bytes_max = 0
        self.tracked_max = 0  # over every scrape, not only the points kept for the timeline
        self.ahead_s_max = -float("inf")
        self.points: list[dict[str, float]] = []

    async def run(self) -> None:
        deadline = self.ready_at + self._timeout_s
        while time.monotonic() < deadline:
            scrape = await self.auditor.scrape()
            if scrape is not None:
                self._note(scrape)
            if self.archived_at is not None:
                # the gauges are set at the auditor's commits (every second): read them once more
                await asyncio.sleep(1.2)
                final = await self.auditor.scrape()
                if final is not None:
                    self.tracked_max = max(self.tracked_max, final.tracked_events)
                return
            if self.read_at is not None and time.monotonic() > self.read_at + 3 * self._roll_s:
                return  # read, but the rows were not all seen archived: reported as None
            await asyncio.sleep(self._scrape_s)
        raise RuntimeError(
            f"the auditor did not read {self.events:,} events in {self._timeout_s:.0f} s;"
            f" last scrape: {self.last}"
        )

    def _note(self, scrape: Scrape) -> None:
        self.last = scrape
        taken = scrape.records.get(self.topic, 0)
        if not taken:
            self._intake_none_s = scrape.at_s
        elif self._intake_first is None:
            # read whole between two scrapes (a loaded machine, a small backlog): counted
            # from the last scrape that saw none, else its rate would be 0
            none_s = self._intake_none_s
            if taken >= self.events and none_s is not None:
                self._intake_first = (none_s, 0)
            else:
                self._intake_first = (scrape.at_s, taken)
        if taken >= self.events and self._intake_done_s is None:
            self._intake_done_s = scrape.at_s
        self.tracked_max = max(self.tracked_max, scrape.tracked_events)
        lag = scrape.lag_of(self.topic)
        partitions = sum(1 for name, _ in scrape.lag if name == self.topic)
        read = self.events - lag if lag is not None and partitions == self._partitions else 0
        self._note_position(read)
        snapshot_bytes = sum(p.stat().st_size for p in (self._archive / "_state").glob(SNAPSHOTS))
        self.snapshot_bytes_max = max(self.snapshot_bytes_max, snapshot_bytes)
        if not self.points or scrape.at_s - self.points[-1]["t_s"] - self.ready_at >= 1.0:
            self.points.append(
                {
                    "t_s": round(scrape.at_s - self.ready_at, 2),
                    "read": read,
                    "tracked": scrape.tracked_events,
                    "unsettled_minutes": scrape.unsettled_minutes,
                    "rss_mb": round(scrape.rss_kb / 1024, 1),
                    "snapshot_mb": round(snapshot_bytes / 2**20, 1),
                    "archive_rows": scrape.archive_rows,
                }
            )
        facts_read = self.facts == 0 or scrape.lag_of(self.audit_topic) == 0
        if self.read_at is None and read == self.events and facts_read:
            self.read_at = scrape.at_s
        rows = self.events * (2 if self.facts else 1)  # entered, and outcomes: one per event
        if self.read_at is not None and scrape.archive_rows >= rows:
            self.archived_at = scrape.at_s

    def _intake_rate(self) -> float:
        if self._intake_first is None or self._intake_done_s is None:
            return 0.0
        first_s, first_records = self._intake_first
        span_s = self._intake_done_s - first_s
        return round((self.events - first_records) / span_s) if span_s > 0 else 0.0

    def _note_position(self, read: int) -> None:
        """How far ahead of the wall clock the last record read is on the timeline."""
        if self._timeline is None or read == 0:
            return
        position_s = self._timeline.event_ms(read - 1) / 1000
        self.ahead_s_max = max(self.ahead_s_max, position_s - time.time())

    def result(self, produce_s: float, peak_rss_kb: int, cores: tuple[float, float]) -> Drain:
        if self.read_at is None or self.last is None:
            raise RuntimeError("the auditor's backlog was not read")
        drain_s = self.read_at - self.ready_at
        first = next((p for p in self.points if p["rss_mb"] > 0), {"rss_mb": 0.0})
        return Drain(
            events=self.events,
            facts=self.facts,
            produce_s=round(produce_s, 1),
            drain_s=round(drain_s, 1),
            events_per_s=round(self.events / drain_s) if drain_s > 0 else 0,
            archived_s=None
            if self.archived_at is None
            else round(self.archived_at - self.ready_at, 1),
            rss_ready_mb=first["rss_mb"],
            peak_rss_mb=round(peak_rss_kb / 1024, 1),
            max_tracked_events=self.tracked_max,
            tracked_at_end=self.last.tracked_events,
            time_past=self.last.odd_records.get("time_past", 0),
            snapshot_mb_max=round(self.snapshot_bytes_max / 2**20, 1),
            ahead_of_clock_s_max=round(self.ahead_s_max, 1) if self._timeline else 0.0,
            cores=(round(cores[0], 2), round(cores[1], 2)),
            intake_events_per_s=self._intake_rate(),
            timeline=self.points,
        )
