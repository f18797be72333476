"""The `hifi-*` headers that travel with an event: its origin, its failures, its hand-offs and dead letters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import orjson

from hifi.vocabulary import Reason

HDR_DEST = "hifi-dest"
HDR_ATTEMPT = "hifi-attempt"
HDR_FIRST_FAILURE_MS = "hifi-first-failure-ms"
HDR_HANDOFF_MS = "hifi-handoff-ms"
HDR_STATUS = "hifi-status"
HDR_ERROR = "hifi-error"
HDR_ORIGIN = "hifi-origin"
HDR_REASON = "hifi-reason"
HDR_HISTORY = "hifi-history"
HDR_DUE_MS = "hifi-due-ms"  # set by the retrier: when a waiting event is due for re-offer
HDR_VALUE_BYTES = "hifi-value-bytes"  # a letter cut to fit the DLQ: the size of the whole value
HDR_EVENT_ID = "hifi-event-id"  # the event's own id, when it has one (for the retrier's facts)
HDR_EVENT_TIME_MS = "hifi-event-time-ms"  # the event time the connector read (same)
# set at a hand-off whose failure has a known cause (a `Reason` value, e.g. unknown_tenant): the
# reason the retrier gives the dead letter when the tiers run out, instead of `expired`
HDR_CAUSE = "hifi-cause"
# set by the ingest service on a record whose event had no readable time: `arrival` (a
# `hifi.vocabulary.EventTimeFrom`), the record's timestamp standing in. Not in HIFI_HEADERS: it
# describes the source record itself, so it travels with the event through hand-offs and
# dead letters like a producer's own header.
HDR_EVENT_TIME = "hifi-event-time"
HIFI_HEADERS = frozenset(
    {
        HDR_DEST,
        HDR_ATTEMPT,
        HDR_FIRST_FAILURE_MS,
        HDR_HANDOFF_MS,
        HDR_STATUS,
        HDR_ERROR,
        HDR_ORIGIN,
        HDR_REASON,
        HDR_HISTORY,
        HDR_DUE_MS,
        HDR_VALUE_BYTES,
        HDR_EVENT_ID,
        HDR_EVENT_TIME_MS,
        HDR_CAUSE,
    }
)
MAX_HISTORY_ENTRIES = 25
Headers = list[tuple[str, bytes]]


class Positioned(Protocol):
    """Where a record sits, and its headers: what its origin is read from."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def headers(self) -> Any: ...


class Failed(Protocol):
    """What the headers of a hand-off or a dead letter say of the event that failed (the
    envelope's `Event` is one): its id, where it came from, its time and its failures so far."""

    @property
    def id(self) -> str: ...
    @property
    def has_id(self) -> bool: ...
    @property
    def origin(self) -> str: ...
    @property
    def event_time_ms(self) -> int: ...
    @property
    def first_failure_ms(self) -> int | None: ...
    @property
    def history(self) -> bytes | None: ...


def header_map(headers: Any) -> dict[str, bytes]:
    """aiokafka headers as a dict, last value winning."""
    return {name: value for name, value in (headers or ()) if value is not None}


def origin_of(record: Positioned, *, retried: bool) -> str:
    """topic/partition/offset where the record's event first entered hifi (kept across retries:
    a `retried` record carries it in `hifi-origin`)."""
    if retried and record.headers:
        origin = header_map(record.headers).get(HDR_ORIGIN)
        if origin:
            return origin.decode("utf-8", errors="replace")
    return f"{record.topic}/{record.partition}/{record.offset}"


def origin_parts_of(record: Positioned, *, retried: bool) -> tuple[str, int, int]:
    """`origin_of` as (topic, partition, offset); an unreadable `hifi-origin` falls back to
    the record's own position."""
    if retried and record.headers:
        parts = parse_origin(header_map(record.headers).get(HDR_ORIGIN))
        if parts is not None:
            return parts
    return (record.topic, record.partition, record.offset)


def parse_origin(raw: bytes | None) -> tuple[str, int, int] | None:
    """(topic, partition, offset) from a `hifi-origin` value; None when it is not one."""
    parts = raw.rsplit(b"/", 2) if raw else []
    if len(parts) != 3 or not parts[0]:
        return None
    partition, offset = header_int(parts[1]), header_int(parts[2])
    if partition is None or offset is None:
        return None
    return (parts[0].decode("utf-8", errors="replace"), partition, offset)


@dataclass(frozen=True, slots=True)
class HandOff:
    """The `hifi-*` headers of a handed-off record, read in one pass: each value None when the
    header is absent or unreadable (its reader picks the fallback)."""

    found: dict[str, bytes]  # every header by name, last value winning
    attempt: int | None
    first_failure_ms: int | None
    handoff_ms: int | None
    due_ms: int | None
    origin: str | None  # `hifi-origin` as written
    origin_parts: tuple[str, int, int] | None  # the same, when it reads as topic/partition/offset
    event_id: str | None
    event_time_ms: int | None
    cause: bytes | None


def read_hand_off(headers: Any) -> HandOff:
    """The `hifi-*` headers of a record the connector handed off (or the retrier moved on)."""
    found = header_map(headers)
    origin, event_id = found.get(HDR_ORIGIN), found.get(HDR_EVENT_ID)
    return HandOff(
        found,
        header_int(found.get(HDR_ATTEMPT)),
        header_int(found.get(HDR_FIRST_FAILURE_MS)),
        header_int(found.get(HDR_HANDOFF_MS)),
        header_int(found.get(HDR_DUE_MS)),
        origin.decode("utf-8", errors="replace") if origin else None,
        parse_origin(origin),
        event_id.decode("utf-8", errors="replace") if event_id else None,
        header_int(found.get(HDR_EVENT_TIME_MS)),
        found.get(HDR_CAUSE),
    )


def header_int(raw: bytes | None) -> int | None:
    """A count or a time in a hifi header; None when absent, not a number, or negative."""
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


_history_entries = msgspec.json.Decoder(list[msgspec.Raw])


def append_history(history: bytes | None, entry: dict[str, Any]) -> bytes:
    """The hifi-history header with one more failure appended (oldest dropped past 25)."""
    entries: list[Any] = []
    if history:
        try:  # the earlier failures pass on as they were written, unread
            kept = _history_entries.decode(history)[1 - MAX_HISTORY_ENTRIES :]
            entries = [orjson.Fragment(bytes(raw)) for raw in kept]
        except (msgspec.DecodeError, RecursionError):  # not JSON, not a list, nested too deep
            entries = []
    entries.append(entry)
    return orjson.dumps(entries)


def failure_headers(
    event: Failed,
    *,
    dest: str,
    status: int | None,
    error: str,
    now_ms: int,
    attempt: int,
    cause: Reason | None = None,
) -> Headers:
    """Headers for a hand-off or a dead letter: where the event came from and what went wrong.

    `hifi-status` is the destination's HTTP status, absent when no reply came. The event's id
    (when it has one) and event time travel too, so the retrier's audit facts can name them.
    `cause`: the reason a hand-off failed when it is known (`hifi-cause`), the reason the
    retrier dead-letters it with if it never succeeds.
    """
    first_failure_ms = event.first_failure_ms if event.first_failure_ms is not None else now_ms
    entry: dict[str, Any] = {"at_ms": now_ms, "attempt": attempt, "error": error}
    if status is not None:
        entry["status"] = status
    headers = [
        (HDR_DEST, dest.encode()),
        (HDR_ATTEMPT, str(attempt).encode()),
        (HDR_FIRST_FAILURE_MS, str(first_failure_ms).encode()),
        (HDR_HANDOFF_MS, str(now_ms).encode()),
        (HDR_ERROR, error.encode()),
        (HDR_ORIGIN, event.origin.encode()),
        (HDR_HISTORY, append_history(event.history, entry)),
        (HDR_EVENT_TIME_MS, str(event.event_time_ms).encode()),
    ]
    if event.has_id:
        headers.append((HDR_EVENT_ID, event.id.encode()))
    if status is not None:
        headers.append((HDR_STATUS, str(status).encode()))
    if cause is not None:
        headers.append((HDR_CAUSE, cause.encode()))
    return headers


def passthrough_headers(headers: Any) -> Headers:
    """The record's own headers without hifi's, so re-written records carry no stale hifi state."""
    return [(name, value) for name, value in (headers or ()) if name not in HIFI_HEADERS]


def reoffer_headers(record: Positioned, *, dest: str) -> Headers:
    """Headers of a source record offered again on NAME.retry_out (a backfill): its own headers,
    its origin and destination, attempt 0 and no history, as the retrier writes a replayed dead
    letter; the connector then delivers it as a fresh event with its original id and origin."""
    return [
        *passthrough_headers(record.headers),
        (HDR_DEST, dest.encode()),
        (HDR_ATTEMPT, b"0"),
        (HDR_ORIGIN, f"{record.topic}/{record.partition}/{record.offset}".encode()),
    ]
