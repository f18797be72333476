"""Events that leave the HTTP path for the retrier (`NAME.retry_in`) or the DLQ (`NAME.dlq`), once acknowledged."""

from __future__ import annotations

import time
from collections.abc import Sequence

from config.catalog import Destination
from connector import metrics
from hifi.envelope import (
    HDR_ATTEMPT,
    HDR_DEST,
    HDR_ERROR,
    HDR_ORIGIN,
    HDR_REASON,
    Event,
    KafkaRecord,
    failure_headers,
    origin_of,
    passthrough_headers,
)
from hifi.kafka import Headers, Record, RecordWriter
from hifi.vocabulary import Reason


class Diverter:
    """Writes events off the HTTP path; returns only once Kafka acknowledged every record."""

    def __init__(self, producer: RecordWriter, dest: Destination) -> None:
        self._producer = producer
        self._dest = dest

    async def to_retrier(self, events: Sequence[Event], *, status: int | None, error: str) -> None:
        """Hand events to the global retrier with their attempt count and failure history."""
        now_ms = int(time.time() * 1000)
        records = [
            (
                self._dest.retry_in_topic,
                event.key,
                event.value,
                event.user_headers
                + failure_headers(
                    event,
                    dest=self._dest.name,
                    status=status,
                    error=error,
                    now_ms=now_ms,
                    attempt=event.attempt + 1,
                ),
            )
            for event in events
        ]
        await self._producer.send_all(records)
        metrics.HANDOFFS.labels(self._dest.name).inc(len(records))

    async def to_dlq(
        self, events: Sequence[Event], *, reason: Reason, status: int | None, error: str
    ) -> None:
        """Dead-letter events the destination will never accept, with the reason."""
        now_ms = int(time.time() * 1000)
        records = [
            (
                self._dest.dlq_topic,
                event.key,
                event.value,
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

    async def records_to_dlq(self, letters: Sequence[tuple[KafkaRecord, Reason, str]]) -> None:
        """Dead-letter records that could not even be read as events: (record, reason, error)."""
        records: list[Record] = []
        for record, reason, error in letters:
            headers: Headers = [
                *passthrough_headers(record.headers),
                (HDR_REASON, reason.encode()),
                (HDR_DEST, self._dest.name.encode()),
                (HDR_ERROR, error.encode()),
                (HDR_ORIGIN, origin_of(record).encode()),
                (HDR_ATTEMPT, b"0"),
            ]
            records.append((self._dest.dlq_topic, record.key, record.value, headers))
        await self._producer.send_all(records)
        for _, reason, _ in letters:
            metrics.DEAD_LETTERS.labels(self._dest.name, reason).inc()
