"""Dead letters of a destination: read and filter NAME.dlq, describe each in one line, replay into NAME.retry_out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from config.catalog import Destination
from config.topics import ensure_destination_topics
from hifi import kafka
from hifi.envelope import HDR_ERROR, HDR_ORIGIN, HDR_REASON, HDR_STATUS, header_map
from hifi.kafka import Headers
from hifi.kafka_settings import KafkaSettings
from hifi.redaction import mask, short_error, shorten
from retrier import headers

_REPLAY_CHUNK = 500
_BODY_EXCERPT_CHARS = 80


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record of NAME.dlq with the headers that explain it."""

    reason: str
    status: str
    error: str
    origin: str
    dead_ms: int  # the record's timestamp: when it was dead-lettered
    key: bytes | None
    value: bytes | None
    headers: Headers

    @classmethod
    def from_record(cls, record: Any) -> DeadLetter:
        headers = header_map(record.headers)
        return cls(
            reason=_text(headers.get(HDR_REASON)) or "unknown",
            status=_text(headers.get(HDR_STATUS)) or "-",
            error=_text(headers.get(HDR_ERROR)) or "",
            origin=_text(headers.get(HDR_ORIGIN))
            or f"{record.topic}/{record.partition}/{record.offset}",
            dead_ms=record.timestamp,
            key=record.key,
            value=record.value,
            headers=list(record.headers or ()),
        )

    def describe(self, now_ms: int) -> str:
        """reason, status, error, origin, age and the start of the body, on one line, masked.

        Each part is masked before it is cut or its quotes replaced, which could otherwise
        leave a piece of a secret that no longer matches it.
        """
        body = shorten((self.value or b"").decode("utf-8", errors="replace"), _BODY_EXCERPT_CHARS)
        error = short_error(self.error).replace('"', "'")
        return mask(
            f'{mask(self.reason)} status={mask(self.status)} error="{error}" '
            f"origin={mask(self.origin)} age={format_age(now_ms - self.dead_ms)} body={body}"
        )


async def read_dead_letters(
    settings: KafkaSettings,
    dest: Destination,
    *,
    reason: str | None = None,
    since_ms: int | None = None,
) -> list[DeadLetter]:
    """The dead letters of `dest` matching the filters, oldest first."""
    fetched = await kafka.read_topic(settings, dest.dlq_topic)
    letters = sorted((DeadLetter.from_record(r) for r in fetched), key=lambda d: d.dead_ms)
    return [
        letter
        for letter in letters
        if (reason is None or letter.reason == reason)
        and (since_ms is None or letter.dead_ms >= since_ms)
    ]


async def replay(settings: KafkaSettings, dest: Destination, letters: Sequence[DeadLetter]) -> int:
    """Re-inject dead letters into NAME.retry_out as fresh events (attempt 0); returns how many."""
    await ensure_destination_topics(settings, dest)
    async with kafka.producer(settings) as producer:
        for start in range(0, len(letters), _REPLAY_CHUNK):
            chunk = letters[start : start + _REPLAY_CHUNK]
            await producer.send_all(
                [(dest.retry_out_topic, d.key, d.value, headers.replayed(d.headers)) for d in chunk]
            )
    return len(letters)


def format_age(ms: int) -> str:
    """A short age: 42s, 3m12s, 2h05m, 4d03h."""
    seconds = max(0, ms // 1000)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _text(raw: bytes | None) -> str | None:
    return raw.decode("utf-8", errors="replace") if raw is not None else None
