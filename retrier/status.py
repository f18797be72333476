"""What operators see: events waiting per stage (NAME.retry_in, each tier, NAME.retry_out) and DLQ
size, measured every few seconds, and the `/status` JSON."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from hifi.background import in_background
from hifi.errors import HifiError
from hifi.headers import HDR_ERROR, HDR_STATUS
from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings
from hifi.redaction import mask, short_error
from retrier import metrics
from retrier.holds import Head
from retrier.tiers import RetryState, Source

log = structlog.get_logger(__name__)

RECENT_FAILURES = 20
RECENT_FAILURES_WINDOW_S = 300  # hand-offs older than this are not "recent", however few came
_PROBE_FETCH_BYTES = 16 * 1024  # the probe only needs watermarks; one small batch per fetch


RETRY_IN, RETRY_OUT = metrics.RETRY_IN, metrics.RETRY_OUT


@dataclass(frozen=True, slots=True)
class Measured:
    """What one topic is to the backlog: its destination, its stage (`RETRY_IN`, a tier index
    as text, `RETRY_OUT`; None for NAME.dlq) and the group whose committed offset is where its
    waiting events begin (the retrier's, the connector's for NAME.retry_out; None for NAME.dlq)."""

    dest: str
    stage: str | None
    group: str | None


def measured_topics(sources: Mapping[str, Source], group_id: str) -> dict[str, Measured]:
    """Every topic among `sources` (NAME.retry_in and the tiers, read by the retrier's group
    `group_id`), and the NAME.retry_out (read by the connector's group) and NAME.dlq of each of
    their destinations."""
    measured = {
        topic: Measured(source.dest.name, _stage(source.tier), group_id)
        for topic, source in sources.items()
    }
    for source in sources.values():
        dest = source.dest
        measured[dest.retry_out_topic] = Measured(dest.name, RETRY_OUT, dest.connector_group)
        measured[dest.dlq_topic] = Measured(dest.name, None, None)
    return measured


def _stage(tier: int | None) -> str:
    return RETRY_IN if tier is None else str(tier)


def _stage_order(stage: str) -> tuple[int, int]:
    """NAME.retry_in first, then the tiers in order, NAME.retry_out last: an event's path."""
    if stage == RETRY_IN:
        return (0, 0)
    return (2, 0) if stage == RETRY_OUT else (1, int(stage))


class Backlog:
    """The last measurement of the retry and DLQ topics of every served destination.

    Waiting events per stage: records between the committed offset of the group reading the
    topic and its high watermark, one event each (the connector hands off, and the retrier
    routes and re-offers, one record per event); an event is counted once more for a moment
    while the record that moves it on is written and the one it leaves is not committed yet.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, dict[str, int]] = {}
        self._dlq: dict[str, int] = {}
        self.refreshed_ms: int | None = None

    def stages(self, dest: str) -> dict[str, int]:
        """Events waiting per stage as of the last refresh, in an event's order: `retry_in`, the
        tiers, `retry_out` (stages never measured are absent)."""
        waiting = self._waiting.get(dest, {})
        return {stage: waiting[stage] for stage in sorted(waiting, key=_stage_order)}

    def waiting(self, dest: str) -> dict[int, int]:
        """Events waiting per tier index, as of the last refresh (tiers never measured are absent)."""
        stages = self._waiting.get(dest, {})
        return {int(stage): n for stage, n in stages.items() if stage not in (RETRY_IN, RETRY_OUT)}

    def dlq_size(self, dest: str) -> int | None:
        return self._dlq.get(dest)

    def update(self, waiting: dict[str, dict[str, int]], dlq: dict[str, int], now_ms: int) -> None:
        self._waiting, self._dlq, self.refreshed_ms = waiting, dlq, now_ms
        for dest, stages in waiting.items():
            for stage, count in stages.items():
                metrics.WAITING.labels(dest, stage).set(count)
        for dest, size in dlq.items():
            metrics.DLQ_RECORDS.labels(dest).set(size)


@contextlib.asynccontextmanager
async def measuring(
    settings: KafkaSettings, group_id: str, topics: Mapping[str, Measured], *, every_s: float
) -> AsyncIterator[Backlog]:
    """A `Backlog` re-measured every `every_s` by a task that ends with the block.

    A consumer that joins no group reads the retrier group's (`group_id`) committed offsets and
    learns each partition's high watermark from fetch responses (ListOffsets is not trusted on
    every broker); after each refresh it seeks to the watermark, so it never reads a backlog
    more than once. The committed offsets of another group (a connector's, of NAME.retry_out)
    are read through a consumer of that group that never joins it either (OffsetFetch).
    """
    backlog = Backlog()
    async with contextlib.AsyncExitStack() as stack:
        probe = await stack.enter_async_context(
            open_consumer(settings, group_id=group_id, max_partition_fetch_bytes=_PROBE_FETCH_BYTES)
        )
        readers = {group_id: probe}
        for group in sorted({m.group for m in topics.values() if m.group is not None} - {group_id}):
            readers[group] = await stack.enter_async_context(
                open_consumer(settings, group_id=group)
            )
        probe.assign(tp for topic in topics for tp in probe.partitions(topic))

        async def refresh_forever() -> None:
            while True:
                await _refresh(probe, readers, topics, backlog)
                await asyncio.sleep(every_s)

        async with in_background(refresh_forever(), name="retrier-backlog"):
            yield backlog


async def _refresh(
    probe: Consumer,
    readers: Mapping[str, Consumer],
    topics: Mapping[str, Measured],
    backlog: Backlog,
) -> None:
    """Re-measure every topic; on a Kafka error keep the previous numbers and log a warning."""
    try:
        await probe.getmany(timeout_ms=0)  # discard; fetching again updates the watermarks
        waiting: dict[str, dict[str, int]] = defaultdict(dict)
        dlq: dict[str, int] = defaultdict(int)
        for tp in probe.assignment():
            highwater = probe.highwater(tp)
            if highwater is None:
                continue
            measured = topics[tp.topic]
            if measured.stage is None or measured.group is None:
                dlq[measured.dest] += highwater
            else:
                committed = await readers[measured.group].committed(tp) or 0
                stages = waiting[measured.dest]
                stages[measured.stage] = stages.get(measured.stage, 0) + max(
                    0, highwater - committed
                )
            probe.seek(tp, highwater)
    except HifiError as exc:
        log.warning("backlog_refresh_failed", error=str(exc))
        return
    backlog.update(dict(waiting), dict(dlq), int(time.time() * 1000))


class RecentFailures:
    """The last few failures handed to the retrier, per destination, for the status page: at
    most `size`, and only those handed off in the last `window_s` seconds, each with its age.

    Texts are masked as they are stored: a `hifi-error` written by a connector that knew fewer
    secrets, or none, still shows `***` where a secret of this catalog was.
    """

    def __init__(
        self, size: int = RECENT_FAILURES, window_s: int = RECENT_FAILURES_WINDOW_S
    ) -> None:
        self._size = size
        self.window_s = window_s
        self._by_dest: dict[str, deque[dict[str, Any]]] = {}

    def note(self, dest: str, headers: Mapping[str, bytes], state: RetryState) -> None:
        entries = self._by_dest.setdefault(dest, deque(maxlen=self._size))
        entries.append(
            {
                "at_ms": state.handoff_ms,
                "at": _iso(state.handoff_ms),
                "attempt": state.attempt,
                "status": self._masked(headers.get(HDR_STATUS), mask),
                "error": self._masked(headers.get(HDR_ERROR), short_error),
            }
        )

    def of(self, dest: str, now_ms: int) -> list[dict[str, Any]]:
        """Those handed off in the last `window_s` seconds before `now_ms`, newest first, each
        with its `age_s`."""
        since_ms = now_ms - self.window_s * 1000
        return [
            entry | {"age_s": max(0.0, (now_ms - entry["at_ms"]) / 1000)}
            for entry in reversed(self._by_dest.get(dest, ()))
            if entry["at_ms"] >= since_ms
        ]

    @staticmethod
    def _masked(raw: bytes | None, masked: Callable[[str], str]) -> str | None:
        text = _text(raw)
        return masked(text) if text is not None else None


class RecentOutcomes:
    """Re-offers and expiries per destination: totals since start and the last minute's, for the
    rate on the status page (one entry per acknowledged produce, not per event)."""

    WINDOW_MS = 60_000

    def __init__(self) -> None:
        self._recent: dict[str, deque[tuple[int, int, int]]] = {}
        self._totals: dict[str, list[int]] = {}

    def note(self, dest: str, now_ms: int, *, reoffered: int, expired: int) -> None:
        if not reoffered and not expired:
            return
        recent = self._recent.setdefault(dest, deque())
        recent.append((now_ms, reoffered, expired))
        totals = self._totals.setdefault(dest, [0, 0])
        totals[0] += reoffered
        totals[1] += expired
        self._forget(recent, now_ms)

    def of(self, dest: str, now_ms: int) -> dict[str, Any]:
        recent = self._recent.get(dest, deque())
        self._forget(recent, now_ms)
        reoffered_total, expired_total = self._totals.get(dest, (0, 0))
        return {
            "reoffered_per_s": sum(n for _, n, _ in recent) / (self.WINDOW_MS / 1000),
            "expired_last_minute": sum(n for _, _, n in recent),
            "reoffered_since_start": reoffered_total,
            "expired_since_start": expired_total,
        }

    def _forget(self, recent: deque[tuple[int, int, int]], now_ms: int) -> None:
        while recent and recent[0][0] < now_ms - self.WINDOW_MS:
            recent.popleft()


def oldest_age_s(heads: Iterable[Head], now_ms: int) -> float | None:
    """Seconds since the first failure of the oldest held event; None when nothing is held."""
    first = min((head.first_failure_ms for head in heads), default=None)
    return None if first is None else max(0.0, (now_ms - first) / 1000)


def document(
    dests: Iterable[str],
    *,
    backlog: Backlog | None,
    heads: Iterable[Head],
    recent: RecentFailures,
    now_ms: int,
    outcomes: RecentOutcomes | None = None,
) -> dict[str, Any]:
    """The `/status` JSON: per destination, waiting per stage (`retry_in`, each tier,
    `retry_out`) and in all, oldest age, next due, re-offers and expiries, DLQ size, the failures
    handed off in the last few minutes."""
    held: dict[str, list[Head]] = defaultdict(list)
    for head in heads:
        held[head.dest].append(head)
    report: dict[str, Any] = {}
    for dest in dests:
        next_due_ms = min((head.due_ms for head in held[dest]), default=None)
        waiting = backlog.waiting(dest) if backlog else {}
        stages = backlog.stages(dest) if backlog else {}
        report[dest] = {
            "waiting_per_tier": {str(tier): count for tier, count in sorted(waiting.items())},
            "waiting_per_stage": stages,
            "waiting_total": sum(stages.values()),
            "oldest_waiting_age_s": oldest_age_s(held[dest], now_ms),
            "next_due": _iso(next_due_ms) if next_due_ms is not None else None,
            "next_due_in_s": (
                max(0.0, (next_due_ms - now_ms) / 1000) if next_due_ms is not None else None
            ),
            "held_partitions": len(held[dest]),
            "dlq_size": backlog.dlq_size(dest) if backlog else None,
            "recent_failures": recent.of(dest, now_ms),
            "recent_failures_window_s": recent.window_s,
            **(outcomes.of(dest, now_ms) if outcomes is not None else {}),
        }
    refreshed = backlog.refreshed_ms if backlog else None
    return {
        "now": _iso(now_ms),
        "backlog_measured": _iso(refreshed) if refreshed is not None else None,
        "destinations": report,
    }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _text(raw: bytes | None) -> str | None:
    return raw.decode("utf-8", errors="replace") if raw is not None else None
