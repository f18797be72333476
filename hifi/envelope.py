"""The message envelope: how a Kafka record becomes an `Event`, and the `hifi-*` headers that travel with it."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import msgspec
import orjson
from aiokafka import TopicPartition

from hifi.errors import MalformedRecord
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
_JSON_ARRAY_OVERHEAD_BYTES = 2  # the brackets around a one-event json_array body
MAX_EVENT_TIME_MS = 253_402_300_800_000  # 10000-01-01: a later or non-positive time is not a time
_MAX_INT_ID = 10**38  # a numeric id beyond this (128 bits) is not an id

Headers = list[tuple[str, bytes]]


class KafkaRecord(Protocol):
    """The fields hifi reads from an aiokafka `ConsumerRecord`."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Any


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


class Event(msgspec.Struct, gc=False):
    """One record on its way to the destination.

    Intake sets only what every event needs (where it is, its bytes, its id and time) and keeps
    the record's key, headers and Kafka timestamp; what only a failure needs (origin, attempt
    count, history, the headers to pass on) is read from them when asked, so the common path
    builds one small object per record. The aiokafka record itself is not kept: it is freed once its poll is
    parsed, so a buffer of many events (a tenant destination holds up to 100,000) does not hold
    their records too, and the next poll's records reuse its memory while it is still in the
    CPU's cache (a tenant destination's drain went from 77-86k to 94-100k events/s,
    `docs/performance.md`). Only a record that came back from the retrier (`retried`) carries
    hifi's own `hifi-*` headers; on any other record they are a producer's, and are neither
    believed nor passed on.
    """

    tp: TopicPartition
    offset: int
    value: bytes  # the original record value, forwarded untouched
    id: str
    event_time_ms: int
    key: bytes | None  # the record's key and headers, passed on at a hand-off or dead letter
    headers: Any  # a sequence of (name, value), as aiokafka reads them; () when none
    kafka_timestamp_ms: int  # the record's Kafka timestamp (the auditor's minute for bad times)
    retried: bool  # read from NAME.retry_out: its hifi-* headers are hifi's
    taken_ms: int  # when the connector took the record in (epoch ms, one value per poll)
    has_id: bool  # False when `id` fell back to the origin

    @property
    def tenant(self) -> Any:
        """None: only a `TenantEvent` (a destination with `[lookups]`) has read a tenant."""
        return None

    @property
    def topic(self) -> str:
        topic: str = self.tp.topic
        return topic

    @property
    def partition(self) -> int:
        partition: int = self.tp.partition
        return partition

    @property
    def origin(self) -> str:
        """topic/partition/offset where the event first entered hifi (kept across retries)."""
        return origin_of(self, retried=self.retried)

    @property
    def origin_parts(self) -> tuple[str, int, int]:
        """The origin as (topic, partition, offset), for the audit trail."""
        return origin_parts_of(self, retried=self.retried)

    @property
    def audit_id(self) -> str | None:
        """The event's own id; None when it has none (the audit trail counts it by origin)."""
        return self.id if self.has_id else None

    @property
    def attempt(self) -> int:
        """Hand-offs to the retrier so far."""
        return header_int(self._hifi_header(HDR_ATTEMPT)) or 0

    @property
    def first_failure_ms(self) -> int | None:
        return header_int(self._hifi_header(HDR_FIRST_FAILURE_MS))

    @property
    def history(self) -> bytes | None:
        """The hifi-history header as received."""
        return self._hifi_header(HDR_HISTORY)

    @property
    def user_headers(self) -> Headers:
        """The record's own headers, forwarded on hand-off and dead letter."""
        return passthrough_headers(self.headers)

    def _hifi_header(self, name: str) -> bytes | None:
        headers = self.headers
        return header_map(headers).get(name) if headers and self.retried else None


class TenantEvent(Event):
    """An event of a destination with `[lookups]`: also the value of its `tenant_field` as read
    (a str for a well-formed event, any JSON value otherwise; None when it has none). A class of
    its own, so the events of other destinations are built exactly as before."""

    tenant: Any = None


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


@dataclass(slots=True)
class Parsed:
    """What one partition's records became: events, and records that can never be events."""

    events: list[Event] = field(default_factory=list)
    malformed: list[tuple[KafkaRecord, MalformedRecord]] = field(default_factory=list)
    missing_id: int = 0  # events whose id fell back to their origin
    missing_time: int = 0  # events whose time fell back to the Kafka timestamp


def parse_records(
    tp: TopicPartition,
    records: Iterable[KafkaRecord],
    *,
    id_field: str,
    event_time_field: str,
    max_bytes: int,
    taken_ms: int,
    retried: bool = False,
    tenant_field: str | None = None,
) -> Parsed:
    """Read the records of one partition as events; malformed and oversize ones are set apart.

    `taken_ms` is when the connector took this poll in (epoch ms), stamped on every event; with
    `tenant_field`, the events are `TenantEvent`s, with that field's value as read.

    This is the connector's per-record hot path. Each value is validated as one JSON object of
    UTF-8 text, but only the id and event-time fields are built as Python objects; the value
    itself is forwarded as it came. Whatever goes wrong reading one record (a parser error, a
    nesting too deep, an id too large to print) makes that record malformed, with the parser's
    error: it never escapes, so one record can never stop a partition.
    """
    parsed = Parsed()
    malformed = parsed.malformed
    append = parsed.events.append  # bound once: the loop below runs once per record
    decode = _field_reader(id_field, event_time_field, tenant_field).decode
    with_tenant = tenant_field is not None
    limit = max_bytes - _JSON_ARRAY_OVERHEAD_BYTES
    for record in records:
        value = record.value
        try:
            if value is None or len(value) > limit:
                raise _unusable(value, max_bytes)
            fields = decode(value)
            if not value.isascii():
                value.decode()  # the decoder skips the text of unread fields; JSON is UTF-8
            event_id = fields.id
            if type(event_id) is not str or not event_id:
                event_id = _as_id(event_id)
            event_time_ms = fields.event_time
            if type(event_time_ms) is not int or not 0 < event_time_ms < MAX_EVENT_TIME_MS:
                event_time_ms = parse_event_time(event_time_ms)
        except MalformedRecord as exc:
            malformed.append((record, exc))
            continue
        except Exception as exc:  # every failure to read one record is that record's outcome
            malformed.append((record, _malformed_value(exc)))
            continue
        has_id = event_id is not None
        if not has_id:
            parsed.missing_id += 1
            event_id = origin_of(record, retried=retried)
        if event_time_ms is None:
            parsed.missing_time += 1
            event_time_ms = record.timestamp
        append(
            TenantEvent(
                tp, record.offset, value, event_id, event_time_ms, record.key,
                record.headers or (), record.timestamp, retried, taken_ms, has_id, fields.tenant,
            )
            if with_tenant
            else Event(
                tp, record.offset, value, event_id, event_time_ms, record.key,
                record.headers or (), record.timestamp, retried, taken_ms, has_id,
            )
        )  # fmt: skip
    return parsed


class _EventFields(Protocol):
    id: Any
    event_time: Any
    tenant: Any


@functools.cache
def _field_reader(
    id_field: str, event_time_field: str, tenant_field: str | None = None
) -> msgspec.json.Decoder[_EventFields]:
    """A decoder that checks a whole JSON object and builds only its id and event-time fields
    (and its tenant field, when given).

    Decoding into a struct of two fields skips every other value without making Python objects
    of it: about half the cost of a full parse for a 1 KB event.
    """
    names = [("id", Any, None), ("event_time", Any, None)]
    rename = {"id": id_field, "event_time": event_time_field}
    if tenant_field is not None:
        names.append(("tenant", Any, None))
        rename["tenant"] = tenant_field
    fields = msgspec.defstruct("EventFields", names, rename=rename, gc=False)
    return msgspec.json.Decoder(fields)


def _malformed_value(exc: Exception) -> MalformedRecord:
    if isinstance(exc, UnicodeDecodeError):
        return MalformedRecord(
            f"value is not UTF-8: {exc.reason} at byte {exc.start}", reason=Reason.MALFORMED
        )
    if isinstance(exc, RecursionError):
        return MalformedRecord("value nests deeper than the parser allows", reason=Reason.MALFORMED)
    text = str(exc)
    if not isinstance(exc, msgspec.DecodeError):
        return MalformedRecord(
            f"value cannot be read: {type(exc).__name__}: {text}", reason=Reason.MALFORMED
        )
    if text.startswith("Expected `object`, got `"):
        kind = text.removeprefix("Expected `object`, got `").partition("`")[0]
        return MalformedRecord(f"value is JSON {kind}, not an object", reason=Reason.MALFORMED)
    return MalformedRecord(f"value is not JSON: {text}", reason=Reason.MALFORMED)


def _unusable(value: bytes | None, max_bytes: int) -> MalformedRecord:
    if value is None:
        return MalformedRecord("record has no value (tombstone)", reason=Reason.MALFORMED)
    return MalformedRecord(
        f"record is {len(value)} bytes, over max_batch_bytes={max_bytes}", reason=Reason.TOO_LARGE
    )


def _as_id(raw: Any) -> str | None:
    if isinstance(raw, str) and raw:
        return raw
    if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) < _MAX_INT_ID:
        return str(raw)
    return None


_RFC3339_Z = re.compile(r"[zZ]$")


def parse_event_time(raw: Any) -> int | None:
    """Epoch milliseconds from a number of ms or an RFC 3339 string; None when absent or unreadable."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return int(raw) if 0 < raw < MAX_EVENT_TIME_MS else None
    if isinstance(raw, str) and raw:
        try:
            parsed = datetime.fromisoformat(_RFC3339_Z.sub("+00:00", raw))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            return None
        epoch_ms = int(parsed.timestamp() * 1000)
        return epoch_ms if 0 < epoch_ms < MAX_EVENT_TIME_MS else None
    return None


def header_int(raw: bytes | None) -> int | None:
    """A count or a time in a hifi header; None when absent, not a number, or negative."""
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def append_history(history: bytes | None, entry: dict[str, Any]) -> bytes:
    """The hifi-history header with one more failure appended (oldest dropped past 25)."""
    entries: list[Any] = []
    if history:
        try:
            loaded = orjson.loads(history)
            entries = loaded if isinstance(loaded, list) else []
        except orjson.JSONDecodeError:
            entries = []
    entries.append(entry)
    return orjson.dumps(entries[-MAX_HISTORY_ENTRIES:])


def failure_headers(
    event: Event,
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


def reoffer_headers(record: KafkaRecord, *, dest: str) -> Headers:
    """Headers of a source record offered again on NAME.retry_out (a backfill): its own headers,
    its origin and destination, attempt 0 and no history, as the retrier writes a replayed dead
    letter; the connector then delivers it as a fresh event with its original id and origin."""
    return [
        *passthrough_headers(record.headers),
        (HDR_DEST, dest.encode()),
        (HDR_ATTEMPT, b"0"),
        (HDR_ORIGIN, f"{record.topic}/{record.partition}/{record.offset}".encode()),
    ]
