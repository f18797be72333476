"""Dead letters of a destination: read and filter NAME.dlq, describe each in one line, replay into NAME.retry_out.

A replay is recorded in NAME.dlq_replays (`retrier.replays`); a letter replayed before is
skipped by the next replay unless it asks for it again. Everything here takes the letters and
the marks as values, so the CLI and a page served by the retrier share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from config.destination import Destination
from config.topics import ensure_destination_topics
from hifi.headers import HDR_ERROR, HDR_ORIGIN, HDR_REASON, HDR_STATUS, header_map
from hifi.kafka.clients import Headers
from hifi.kafka.producing import RecordWriter, open_producer
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from hifi.redaction import mask, short_error, shorten
from retrier import headers
from retrier.replays import (
    Coordinate,
    Mark,
    ReplayFilter,
    ReplayMarks,
    ReplayRecord,
    checked_operator,
    read_replay_marks,
    record_replay,
)

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
    partition: int  # where the letter is in NAME.dlq: the coordinates a replay record names
    offset: int

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
            partition=record.partition,
            offset=record.offset,
        )

    @property
    def coordinate(self) -> Coordinate:
        return self.partition, self.offset

    def describe(self, now_ms: int, mark: Mark | None = None) -> str:
        """reason, status, error, origin, age, the last replay if any and the start of the body,
        on one line, masked.

        Each part is masked before it is cut or its quotes replaced, which could otherwise
        leave a piece of a secret that no longer matches it.
        """
        body = shorten((self.value or b"").decode("utf-8", errors="replace"), _BODY_EXCERPT_CHARS)
        error = short_error(self.error).replace('"', "'")
        replayed = "" if mark is None else f"{mask(mark.describe())} "
        return mask(
            f'{mask(self.reason)} status={mask(self.status)} error="{error}" '
            f"origin={mask(self.origin)} age={format_age(now_ms - self.dead_ms)} "
            f"{replayed}body={body}"
        )


async def read_dead_letters(
    settings: KafkaSettings,
    dest: Destination,
    *,
    reason: str | None = None,
    since_ms: int | None = None,
) -> list[DeadLetter]:
    """The dead letters of `dest` matching the filters, oldest first."""
    fetched = await read_topic(settings, dest.dlq_topic)
    letters = sorted((DeadLetter.from_record(r) for r in fetched), key=lambda d: d.dead_ms)
    return [
        letter
        for letter in letters
        if (reason is None or letter.reason == reason)
        and (since_ms is None or letter.dead_ms >= since_ms)
    ]


async def read_marked_letters(
    settings: KafkaSettings,
    dest: Destination,
    *,
    reason: str | None = None,
    since_ms: int | None = None,
) -> tuple[list[DeadLetter], ReplayMarks]:
    """The dead letters of `dest` matching the filters, oldest first, and the replay marks."""
    letters = await read_dead_letters(settings, dest, reason=reason, since_ms=since_ms)
    return letters, await read_replay_marks(settings, dest)


def select_marked(
    letters: Sequence[DeadLetter], marks: ReplayMarks, *, replayed: bool
) -> list[DeadLetter]:
    """The letters replayed before (`replayed`), or those never replayed."""
    return [letter for letter in letters if (letter.coordinate in marks) is replayed]


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What a replay of the selected letters does: re-offers `letters`, skips `skipped`."""

    letters: list[DeadLetter]
    skipped: list[DeadLetter]  # replayed before, and not asked for again


def plan_replay(letters: Sequence[DeadLetter], marks: ReplayMarks, *, again: bool) -> ReplayPlan:
    """Every selected letter with `again`; otherwise only those never replayed."""
    if again:
        return ReplayPlan(list(letters), [])
    return ReplayPlan(
        select_marked(letters, marks, replayed=False), select_marked(letters, marks, replayed=True)
    )


async def replay(
    settings: KafkaSettings,
    dest: Destination,
    letters: Sequence[DeadLetter],
    *,
    by: str,
    filter: ReplayFilter,
) -> int:
    """Re-inject dead letters into NAME.retry_out as fresh events (attempt 0) and record the
    replay in NAME.dlq_replays; returns how many."""
    await ensure_destination_topics(settings, dest)
    async with open_producer(settings) as producer:
        await replay_with(producer, dest, letters, by=by, filter=filter)
    return len(letters)


async def replay_with(
    producer: RecordWriter,
    dest: Destination,
    letters: Sequence[DeadLetter],
    *,
    by: str,
    filter: ReplayFilter,
) -> list[ReplayRecord]:
    """`replay` through a producer of the caller's (acks=all); returns the replay records."""
    checked_operator(by)  # a bad name is refused before anything is written
    for start in range(0, len(letters), _REPLAY_CHUNK):
        chunk = letters[start : start + _REPLAY_CHUNK]
        await producer.send_all(
            [(dest.retry_out_topic, d.key, d.value, headers.replayed(d.headers)) for d in chunk]
        )
    # The mark is written only after the letters were acknowledged on NAME.retry_out. A crash
    # between the two leaves them unmarked, so the next replay repeats them (delivered twice;
    # destinations deduplicate by event id) instead of marking letters that never reached
    # NAME.retry_out, which no later replay would then pick up.
    return await record_replay(
        producer, dest, [letter.coordinate for letter in letters], by=by, filter=filter
    )


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
