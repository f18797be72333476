"""What operators see of a connector: the `/status` JSON and a progress line per minute, both read from its metrics."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import prometheus_client
import structlog
from aiokafka import TopicPartition
from starlette.requests import Request

from config.destination import Destination
from connector import metrics
from hifi.ops_http import JsonProvider, OpsServer
from hifi.vocabulary import Outcome, Reason

log = structlog.get_logger(__name__)

PROGRESS_EVERY_S = 60.0
_OUTCOMES = (Outcome.DELIVERED, Outcome.HANDED_OFF, Outcome.DEAD_LETTERED, Outcome.FILTERED)
_STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx", "timeout", "connection")
_SENT = (Outcome.DELIVERED, Outcome.HANDED_OFF, Outcome.DEAD_LETTERED)


def totals(dest: str) -> dict[str, int]:
    """Records by outcome, dead letters by reason and requests by result, since the start."""
    records = _counts(metrics.RECORDS, dest, "outcome")
    dead = _counts(metrics.DEAD_LETTERS, dest, "reason")
    requests = _counts(metrics.REQUESTS, dest, "status_class")
    found = {str(outcome): records.get(outcome, 0) for outcome in _OUTCOMES}
    found.update({f"dead_lettered.{reason}": dead.get(reason, 0) for reason in Reason})
    found.update({f"requests.{name}": requests.get(name, 0) for name in _STATUS_CLASSES})
    return found


def health(dest: str) -> dict[str, Any]:
    """The destination's health since the start, in batches and in events: a rejected batch is
    one failed batch, whatever its bisection cost, and its failed events are those it
    dead-lettered; HTTP attempts by result and bisection requests are counted apart."""
    requests = _counts(metrics.REQUESTS, dest, "status_class")
    batches = _counts(metrics.BATCHES, dest, "result")
    events = _counts(metrics.SENT_EVENTS, dest, "outcome")
    by_result = {result: batches.get(result, 0) for result in metrics.BATCH_RESULTS}
    by_outcome = {str(outcome): events.get(outcome, 0) for outcome in _SENT}
    return {
        "batches": by_result,
        "failed_batch_share": _share(by_result, ok="delivered"),
        "events": by_outcome,
        "failed_event_share": _share(by_outcome, ok=Outcome.DELIVERED),
        "requests": {name: requests.get(name, 0) for name in _STATUS_CLASSES},
        "bisection_requests": _counts(metrics.BISECTION_REQUESTS, dest, "dest").get(dest, 0),
    }


def _share(counts: Mapping[str, int], *, ok: str) -> float | None:
    """The share of `counts` not under `ok`, to 4 places; None when all are 0."""
    total = sum(counts.values())
    return round(1 - counts[ok] / total, 4) if total else None


def _counts(counter: prometheus_client.Counter, dest: str, label: str) -> dict[str, int]:
    """One counter's totals for `dest`, by `label`: that counter collected once."""
    (family,) = counter.collect()
    return {
        sample.labels[label]: int(sample.value)
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("dest") == dest
    }


def percentile_s(counts: Sequence[int], bounds: Sequence[float], fraction: float) -> float | None:
    """The upper bound of the bucket holding the `fraction` quantile (None without data)."""
    total = sum(counts)
    if not total:
        return None
    for bound, seen in zip(bounds, itertools.accumulate(counts), strict=True):
        if seen >= fraction * total:
            return bound
    return bounds[-1]


class Progress:
    """One `progress` log line per minute: what the last minute delivered, handed off and
    dead-lettered, and its p95 end-to-end lag (the upper bound of its histogram bucket)."""

    def __init__(self, dest: str, every_s: float = PROGRESS_EVERY_S) -> None:
        self._dest = dest
        self._every_s = every_s
        self._lag = metrics.LAG_OUT.labels(dest, "first")
        self._last_totals = totals(dest)
        self._last_counts = list(self._lag.counts)
        self._next_s = time.monotonic() + every_s

    def tick(self) -> None:
        """Log the minute's line if a minute has passed since the last one."""
        now_s = time.monotonic()
        if now_s < self._next_s:
            return
        self._next_s = now_s + self._every_s
        now_totals, now_counts = totals(self._dest), list(self._lag.counts)
        delta = {key: now_totals[key] - self._last_totals.get(key, 0) for key in now_totals}
        minute_counts = [
            now - before for now, before in zip(now_counts, self._last_counts, strict=True)
        ]
        self._last_totals, self._last_counts = now_totals, now_counts
        log.info(
            "progress",
            delivered=delta[Outcome.DELIVERED],
            handed_off=delta[Outcome.HANDED_OFF],
            dead_lettered=delta[Outcome.DEAD_LETTERED],
            lag_p95_s=percentile_s(minute_counts, metrics.LAG_BOUNDS_S, 0.95),
            window_s=self._every_s,
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The connector's work in hand, as `/status` shows it."""

    paused: bool
    pending_events: int
    in_flight_requests: int
    lag_records: Mapping[TopicPartition, int]
    last_delivered_ms: int | None
    recent_failures: Sequence[Mapping[str, Any]]
    breakers: Mapping[str, Any] = field(default_factory=dict)  # `Breakers.describe()`
    rate_limits: Mapping[str, Any] = field(default_factory=dict)  # `RateLimits.describe()`
    concurrency: Mapping[str, Any] | None = None  # the in-flight limit and RTTs (`Limiter.view`)


def page(
    dest: Destination,
    ops: OpsServer,
    snapshot: Callable[[], Snapshot],
    lookups: Callable[[], dict[str, Any]] | None = None,
    started_over: Callable[[], list[dict[str, Any]]] = list,
) -> JsonProvider:
    """The `/status` route of a connector's ops server; `lookups`: its tenant cache's status;
    `started_over`: the source partitions whose topic was created again (`PartitionWorker`)."""

    async def status(request: Request) -> dict[str, Any]:
        now = snapshot()
        found = document(dest.name, url=dest.url, ready=ops.is_ready(), now=now)
        found["partitions_started_over"] = started_over()
        if now.concurrency is not None:
            found["concurrency"] = dict(now.concurrency)
        if lookups is not None:
            found["lookups"] = lookups()
        return found

    return status


def document(dest: str, *, url: str, ready: bool, now: Snapshot) -> dict[str, Any]:
    """The connector's `/status` JSON (`filtered` stays 0 without tenant lookups)."""
    paused, pending_events, in_flight_requests = (
        now.paused,
        now.pending_events,
        now.in_flight_requests,
    )
    lag_records, last_delivered_ms, recent_failures = (
        now.lag_records,
        now.last_delivered_ms,
        now.recent_failures,
    )
    now_ms = int(time.time() * 1000)
    counts = totals(dest)
    lag = metrics.LAG_OUT.labels(dest, "first").counts
    return {
        "now": _iso(now_ms),
        "dest": dest,
        "url": url,
        "ready": ready,
        "intake": {
            "paused": paused,
            "pending_events": pending_events,
            "in_flight_requests": in_flight_requests,
        },
        "consumer_lag_records": {
            f"{tp.topic}/{tp.partition}": n for tp, n in sorted(lag_records.items())
        },
        "totals": {str(outcome): counts[str(outcome)] for outcome in _OUTCOMES}
        | {
            "dead_lettered_by_reason": {
                str(reason): counts[f"dead_lettered.{reason}"] for reason in Reason
            },
        },
        "health": {
            "last_delivered": _iso(last_delivered_ms) if last_delivered_ms else None,
            **health(dest),
            "lag_out_p95_s_since_start": _json_seconds(
                percentile_s(lag, metrics.LAG_BOUNDS_S, 0.95)
            ),
        },
        "breaker": dict(now.breakers),
        "rate_limits": {
            **now.rate_limits,
            "wait_seconds_total": round(_total(metrics.RATE_LIMIT_WAIT_SECONDS, dest), 3),
        },
        "recent_failures": [
            {**entry, "at": _iso(entry["at_ms"])} for entry in reversed(recent_failures)
        ],
    }


def _total(counter: prometheus_client.Counter, dest: str) -> float:
    """A counter labelled by `dest` alone: its total for `dest` (0 before it exists)."""
    (family,) = counter.collect()
    return sum(
        sample.value
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("dest") == dest
    )


def _json_seconds(value: float | None) -> float | str | None:
    """A bucket bound for JSON, which has no infinity: beyond the last bound is "+Inf"."""
    return "+Inf" if value is not None and math.isinf(value) else value


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
