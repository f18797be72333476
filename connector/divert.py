"""Events that leave the HTTP path for the retrier (`NAME.retry_in`) or the DLQ (`NAME.dlq`), once acknowledged.

With an audit trail, each write is followed by its audit fact, awaited too: the caller's
offsets are committed only once both are acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from config.destination import Destination
from connector import metrics
from hifi.audit import AuditTrail, Seen, SentBatch
from hifi.envelope import Event, KafkaRecord
from hifi.headers import (
    HDR_ATTEMPT,
    HDR_DEST,
    HDR_ERROR,
    HDR_ORIGIN,
    HDR_REASON,
    HDR_VALUE_BYTES,
    failure_headers,
    origin_of,
    origin_parts_of,
    passthrough_headers,
)
from hifi.kafka.clients import MAX_REQUEST_BYTES, Headers, Record
from hifi.kafka.producing import RecordWriter
from hifi.vocabulary import Outcome, Reason

# A dead letter is one Kafka record: the producer takes at most 16 MiB per request. A record that
# cannot be written whole (its value, key and headers) becomes a letter with the value's first
# 64 KiB and every header value's first 1 KiB, and says the value's size.
DLQ_RECORD_MAX_BYTES = MAX_REQUEST_BYTES - 64 * 1024
LETTER_VALUE_BYTES = 64 * 1024
LETTER_HEADER_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Diversion:
    """Events taken in that leave the HTTP path with one outcome, decided before any request:
    handed to the retrier with a cause, dead-lettered with a reason, or filtered (an explicit
    rule drops them: they are never sent, and the audit trail says so)."""

    outcome: Outcome  # HANDED_OFF, DEAD_LETTERED or FILTERED
    events: list[Event]
    error: str  # what happened, masked and on one line
    reason: Reason | None = None  # a hand-off's cause, a dead letter's reason


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A record that can never be an event, on its way to the DLQ."""

    record: KafkaRecord
    reason: Reason  # malformed or too_large (a letter may still be cut to fit: too_large)
    error: str
    taken_ms: int  # when the connector took it in


class Diverter:
    """Writes events off the HTTP path; returns only once Kafka acknowledged every record (and
    its audit fact, with a `trail`)."""

    def __init__(
        self, producer: RecordWriter, dest: Destination, *, trail: AuditTrail | None = None
    ) -> None:
        self._producer = producer
        self._dest = dest
        self._trail = trail

    async def divert(self, diversion: Diversion) -> None:
        """Give the diverted events their outcome (a filtered one is only recorded)."""
        events, error, reason = diversion.events, diversion.error, diversion.reason
        if diversion.outcome is Outcome.HANDED_OFF:
            await self.to_retrier(events, status=None, error=error, cause=reason)
        elif diversion.outcome is Outcome.DEAD_LETTERED and reason is not None:
            await self.to_dlq(events, reason=reason, status=None, error=error)
        elif diversion.outcome is Outcome.FILTERED:
            if self._trail is not None:
                await self._trail.record(Outcome.FILTERED, events)
        else:
            raise ValueError(f"cannot divert events as {diversion.outcome} ({reason})")

    async def to_retrier(
        self,
        events: Sequence[Event],
        *,
        status: int | None,
        error: str,
        cause: Reason | None = None,
        sent: SentBatch | None = None,
    ) -> None:
        """Hand events to the global retrier with their attempt count and failure history;
        `cause` (`hifi-cause`) is the reason they are dead-lettered with if they never succeed;
        `sent`: the batch they were sent in, for their audit fact."""
        now_ms = int(time.time() * 1000)
        records = [
            (
                self._dest.retry_in_topic,
                event.key,
                event.wire_value,
                event.user_headers
                + failure_headers(
                    event,
                    dest=self._dest.name,
                    status=status,
                    error=error,
                    now_ms=now_ms,
                    attempt=event.attempt + 1,
                    cause=cause,
                ),
            )
            for event in events
        ]
        await self._producer.send_all(records)
        metrics.HANDOFFS.labels(self._dest.name).inc(len(records))
        if self._trail is not None:
            await self._trail.record(Outcome.HANDED_OFF, events, status=status, sent=sent)

    async def to_dlq(
        self,
        events: Sequence[Event],
        *,
        reason: Reason,
        status: int | None,
        error: str,
        sent: SentBatch | None = None,
    ) -> None:
        """Dead-letter events the destination will never accept, with the reason; `sent`: the
        batch they were sent in, for their audit fact."""
        now_ms = int(time.time() * 1000)
        records = [
            (
                self._dest.dlq_topic,
                event.key,
                event.wire_value,
                [
                    *event.user_headers,
                    (HDR_REASON, reason.encode()),
                    *failure_headers(
                        event,
                        dest=self._dest.name,
                        status=status,
                        error=error,
                        now_ms=now_ms,
                        attempt=event.attempt,
                    ),
                ],
            )
            for event in events
        ]
        await self._producer.send_all(records)
        metrics.DEAD_LETTERS.labels(self._dest.name, reason).inc(len(records))
        if self._trail is not None:
            await self._trail.record(
                Outcome.DEAD_LETTERED, events, reason=reason, status=status, sent=sent
            )

    async def records_to_dlq(self, letters: Sequence[Unreadable]) -> None:
        """Dead-letter records that could not even be read as events; their audit facts name
        them by origin alone (no id), with the reason each letter was written with."""
        records: list[Record] = []
        by_reason: dict[Reason, list[Seen]] = {}
        for letter in letters:
            record, reason = letter.record, letter.reason
            retried = record.topic == self._dest.retry_out_topic
            own = passthrough_headers(record.headers)
            value, key = getattr(record, "raw_value", record.value), record.key  # [decode]
            hifi: Headers = [
                (HDR_DEST, self._dest.name.encode()),
                (HDR_ERROR, letter.error.encode()),
                (HDR_ORIGIN, origin_of(record, retried=retried).encode()),
                (HDR_ATTEMPT, b"0"),
            ]
            if key is None and value is None:
                value = b""  # a keyless tombstone: Kafka clients write no record without both
            if _size(key, value, own) > DLQ_RECORD_MAX_BYTES:
                reason = Reason.TOO_LARGE
                hifi.append((HDR_VALUE_BYTES, str(len(value or b"")).encode()))
                own = [(name, data[:LETTER_HEADER_BYTES] if data else data) for name, data in own]
                key = key[:LETTER_HEADER_BYTES] if key else key
                value = value[:LETTER_VALUE_BYTES] if value else value
            records.append(
                (self._dest.dlq_topic, key, value, [*own, (HDR_REASON, reason.encode()), *hifi])
            )
            origin = origin_parts_of(record, retried=retried)
            by_reason.setdefault(reason, []).append(
                Seen(origin, None, record.timestamp, letter.taken_ms)
            )
        await self._producer.send_all(records)
        for reason, seen in by_reason.items():
            metrics.DEAD_LETTERS.labels(self._dest.name, reason).inc(len(seen))
        if self._trail is not None:
            for reason, seen in by_reason.items():
                await self._trail.record(Outcome.DEAD_LETTERED, seen, reason=reason)


def _size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    return len(key or b"") + len(value or b"") + sum(len(n) + len(v or b"") for n, v in headers)
