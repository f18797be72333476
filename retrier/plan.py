"""Turning fetched records into the records to produce: routing from NAME.retry_in, re-offers from a tier."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from config.destination import Destination
from hifi.audit import Seen
from hifi.kafka.clients import Headers
from hifi.vocabulary import Outcome, Reason
from retrier import headers, metrics
from retrier.holds import Head
from retrier.record import RetryRecord
from retrier.status import RecentFailures
from retrier.tiers import Expire, ReOffer, ToTier, Wait, decide_due, route, tier_topic


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One record to produce, and the consumed record that is done once the broker acknowledged it."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    source: TopicPartition
    offset: int
    outcome: Outcome  # ROUTED, RE_OFFERED, or DEAD_LETTERED (retries ran out)
    tier: int
    due_ms: int
    why: str = ""  # for an expired event: which limit it reached
    event: Seen | None = None  # what the audit fact of a re-offer or an expiry says of it
    reason: Reason | None = None  # a dead letter's: expired, or the cause of its failures

    def as_record(self) -> tuple[str, bytes | None, bytes | None, Headers]:
        # A keyless tombstone (only a foreign producer writes one here) cannot be written by a
        # Kafka client as it is: it travels with an empty value instead.
        value = self.value if self.value is not None or self.key is not None else b""
        return (self.topic, self.key, value, self.headers)

    def count(self, dest_name: str, acked_ms: int) -> None:
        """Record the outcome in the metrics, once the broker acknowledged it at `acked_ms`."""
        if self.outcome is Outcome.ROUTED:
            metrics.ROUTED.labels(dest_name, str(self.tier)).inc()
        elif self.outcome is Outcome.RE_OFFERED:
            metrics.REOFFERED.labels(dest_name).inc()
            late_s = max(0.0, (acked_ms - self.due_ms) / 1000)
            metrics.REOFFER_DELAY.labels(dest_name).observe(late_s)
        else:
            metrics.EXPIRED.labels(dest_name).inc()


def plan_routing(
    dest: Destination,
    tp: TopicPartition,
    fetched: Sequence[Any],
    *,
    now_ms: int,
    recent: RecentFailures,
) -> list[Outgoing]:
    """Each hand-off from NAME.retry_in goes to the tier of its attempt, or expires to NAME.dlq."""
    planned = []
    for record in fetched:
        read = RetryRecord.read(record)
        recent.note(dest.name, read.found, read.state)
        decision = route(
            read.state, tiers_s=dest.retry_tiers_s, max_age_s=dest.max_retry_age_s, now_ms=now_ms
        )
        if isinstance(decision, ToTier):
            planned.append(
                Outgoing(
                    tier_topic(dest.name, decision.tier),
                    record.key,
                    record.value,
                    headers.to_tier(record.headers, due_ms=decision.due_ms),
                    tp,
                    record.offset,
                    Outcome.ROUTED,
                    decision.tier,
                    decision.due_ms,
                )
            )
        else:
            planned.append(_expired(dest, tp, read, decision, tier=-1, due_ms=0))
    return planned


@dataclass(slots=True)
class Reoffers:
    """The records of a tier partition that are due, and the first one that is not (if any)."""

    due: list[Outgoing]
    head: Head | None


def plan_reoffers(
    dest: Destination, tier: int, tp: TopicPartition, fetched: Sequence[Any], *, now_ms: int
) -> Reoffers:
    """Due records go to NAME.retry_out (or expire); planning stops at the first record not due."""
    due: list[Outgoing] = []
    for record in fetched:
        read = RetryRecord.read(record)
        first_failure_ms = read.state.first_failure_ms
        decision = decide_due(
            read.due_ms,
            first_failure_ms=first_failure_ms,
            max_age_s=dest.max_retry_age_s,
            now_ms=now_ms,
        )
        if isinstance(decision, Wait):
            return Reoffers(
                due, Head(dest.name, tier, record.offset, read.due_ms, first_failure_ms)
            )
        if isinstance(decision, ReOffer):
            due.append(
                Outgoing(
                    dest.retry_out_topic,
                    record.key,
                    record.value,
                    headers.to_retry_out(record.headers),
                    tp,
                    record.offset,
                    Outcome.RE_OFFERED,
                    tier,
                    read.due_ms,
                    event=read.seen,
                )
            )
        else:
            due.append(_expired(dest, tp, read, decision, tier=tier, due_ms=read.due_ms))
    return Reoffers(due, None)


def _expired(
    dest: Destination,
    tp: TopicPartition,
    read: RetryRecord,
    decision: Expire,
    *,
    tier: int,
    due_ms: int,
) -> Outgoing:
    record = read.record
    return Outgoing(
        dest.dlq_topic,
        record.key,
        record.value,
        headers.to_dlq(record.headers, reason=read.reason),
        tp,
        record.offset,
        Outcome.DEAD_LETTERED,
        tier,
        due_ms,
        f"{decision.why} (origin {read.origin})",
        read.seen,
        read.reason,
    )
