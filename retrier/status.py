"""What operators see: backlog per tier and DLQ size, measured every few seconds, and the `/status` JSON."""

from __future__ import annotations

import contextlib
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from hifi import kafka
from hifi.envelope import HDR_ERROR, HDR_STATUS
from hifi.errors import HifiError
from hifi.kafka_settings import KafkaSettings
from retrier import metrics
from retrier.holds import Head
from retrier.tiers import RetryState

log = structlog.get_logger(__name__)

RECENT_FAILURES = 20
_PROBE_FETCH_BYTES = 16 * 1024  # the probe only needs watermarks; one small batch per fetch


@dataclass(frozen=True, slots=True)
class Measured:
    """What one topic is to the backlog: the destination and the tier (None for NAME.dlq)."""

    dest: str
    tier: int | None


class Backlog:
    """High watermarks and committed offsets of the tier and DLQ topics of every served destination.

    A consumer that joins no group reads the retrier group's committed offsets and learns each
    partition's high watermark from fetch responses (ListOffsets is not trusted on every broker);
    after each refresh it seeks to the watermark, so it never reads a backlog more than once.
    """

    def __init__(
        self, settings: KafkaSettings, group_id: str, topics: Mapping[str, Measured]
    ) -> None:
        self._settings = settings
        self._group_id = group_id
        self._topics = dict(topics)
        self._consumer: kafka.Consumer | None = None
        self._waiting: dict[str, dict[int, int]] = {}
        self._dlq: dict[str, int] = {}
        self.refreshed_ms: int | None = None

    @contextlib.asynccontextmanager
    async def measuring(self) -> AsyncIterator[Backlog]:
        """Start the probe consumer on every partition of the measured topics; stop it on exit."""
        async with kafka.consumer(
            self._settings, group_id=self._group_id, max_partition_fetch_bytes=_PROBE_FETCH_BYTES
        ) as consumer:
            consumer.assign(tp for topic in self._topics for tp in consumer.partitions(topic))
            self._consumer = consumer
            try:
                yield self
            finally:
                self._consumer = None

    async def refresh(self, now_ms: int) -> None:
        """Re-measure every topic; on a Kafka error keep the previous numbers and log a warning."""
        consumer = self._consumer
        if consumer is None:
            return
        try:
            await consumer.getmany(timeout_ms=0)  # discard; fetching again updates the watermarks
            waiting: dict[str, dict[int, int]] = defaultdict(dict)
            dlq: dict[str, int] = defaultdict(int)
            for tp in consumer.assignment():
                highwater = consumer.highwater(tp)
                if highwater is None:
                    continue
                measured = self._topics[tp.topic]
                if measured.tier is None:
                    dlq[measured.dest] += highwater
                else:
                    committed = await consumer.committed(tp) or 0
                    tiers = waiting[measured.dest]
                    count = max(0, highwater - committed)
                    tiers[measured.tier] = tiers.get(measured.tier, 0) + count
                consumer.seek(tp, highwater)
        except HifiError as exc:
            log.warning("backlog_refresh_failed", error=str(exc))
            return
        self._waiting, self._dlq, self.refreshed_ms = dict(waiting), dict(dlq), now_ms
        self._export()

    def waiting(self, dest: str) -> dict[int, int]:
        """Events waiting per tier index, as of the last refresh (tiers never measured are absent)."""
        return dict(self._waiting.get(dest, {}))

    def dlq_size(self, dest: str) -> int | None:
        return self._dlq.get(dest)

    def _export(self) -> None:
        for dest, tiers in self._waiting.items():
            for tier, count in tiers.items():
                metrics.WAITING.labels(dest, str(tier)).set(count)
        for dest, size in self._dlq.items():
            metrics.DLQ_RECORDS.labels(dest).set(size)


class RecentFailures:
    """The last few failures handed to the retrier, per destination, for the status page."""

    def __init__(self, size: int = RECENT_FAILURES) -> None:
        self._size = size
        self._by_dest: dict[str, deque[dict[str, Any]]] = {}

    def note(self, dest: str, headers: Mapping[str, bytes], state: RetryState) -> None:
        entries = self._by_dest.setdefault(dest, deque(maxlen=self._size))
        entries.append(
            {
                "at": _iso(state.handoff_ms),
                "attempt": state.attempt,
                "status": _text(headers.get(HDR_STATUS)),
                "error": _text(headers.get(HDR_ERROR)),
            }
        )

    def of(self, dest: str) -> list[dict[str, Any]]:
        """Newest first."""
        return list(reversed(self._by_dest.get(dest, ())))


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
) -> dict[str, Any]:
    """The `/status` JSON: per destination, waiting per tier, oldest age, next due, DLQ size, failures."""
    held: dict[str, list[Head]] = defaultdict(list)
    for head in heads:
        held[head.dest].append(head)
    report: dict[str, Any] = {}
    for dest in dests:
        next_due_ms = min((head.due_ms for head in held[dest]), default=None)
        waiting = backlog.waiting(dest) if backlog else {}
        report[dest] = {
            "waiting_per_tier": {str(tier): count for tier, count in sorted(waiting.items())},
            "waiting_total": sum(waiting.values()),
            "oldest_waiting_age_s": oldest_age_s(held[dest], now_ms),
            "next_due": _iso(next_due_ms) if next_due_ms is not None else None,
            "next_due_in_s": (
                max(0.0, (next_due_ms - now_ms) / 1000) if next_due_ms is not None else None
            ),
            "held_partitions": len(held[dest]),
            "dlq_size": backlog.dlq_size(dest) if backlog else None,
            "recent_failures": recent.of(dest),
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
