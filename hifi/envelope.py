"""The message envelope: how a Kafka record becomes an `Event`, and the `hifi-*` headers that travel with it."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import msgspec
from aiokafka import TopicPartition

from hifi.errors import MalformedRecord
from hifi.headers import (
    HDR_ATTEMPT,
    HDR_FIRST_FAILURE_MS,
    HDR_HISTORY,
    Headers,
    header_int,
    header_map,
    origin_of,
    origin_parts_of,
    passthrough_headers,
)
from hifi.vocabulary import Reason

_JSON_ARRAY_OVERHEAD_BYTES = 2  # the brackets around a one-event json_array body
MAX_EVENT_TIME_MS = 253_402_300_800_000  # 10000-01-01: a later or non-positive time is not a time
_MAX_INT_ID = 10**38  # a numeric id beyond this (128 bits) is not an id


class KafkaRecord(Protocol):
    """The fields hifi reads from an aiokafka `ConsumerRecord`."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Any


class Event(msgspec.Struct, gc=False):
    """One record on its way to the destination.

    Intake sets only what every event needs (where it is, its bytes, its id and time) and keeps
    the record's key, headers and Kafka timestamp; what only a failure needs (origin, attempt
    count, history, the headers to pass on) is read from them when asked, so the common path
    builds one small object per record. The aiokafka record itself is not kept: it is freed
    once its poll is parsed, so a buffer of many events (a tenant destination holds up to
    100,000) does not hold their records too, and the next poll's records reuse its memory
    while it is still in the CPU's cache (the drain figures are in `docs/performance.md`).
    Only a record that came back from the retrier (`retried`) carries hifi's own `hifi-*`
    headers; on any other record they are a producer's, and are neither believed nor passed on.
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
    # with `[decode]`: what the producer wrote, `value` being its JSON (hifi.schema_registry)
    raw: bytes | None = None

    @property
    def wire_value(self) -> bytes:
        """The bytes a hand-off, a dead letter or a replay carries: what the producer wrote."""
        return self.value if self.raw is None else self.raw

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
    error: it never escapes, so one record can never stop a partition. It stays one function:
    a helper called per record for the checks costs more than it would read better.
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
                tp,
                record.offset,
                value,
                event_id,
                event_time_ms,
                record.key,
                record.headers or (),
                record.timestamp,
                retried,
                taken_ms,
                has_id,
                tenant=fields.tenant,
            )
            if with_tenant
            else Event(
                tp,
                record.offset,
                value,
                event_id,
                event_time_ms,
                record.key,
                record.headers or (),
                record.timestamp,
                retried,
                taken_ms,
                has_id,
            )
        )
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
    of it, which costs much less than a full parse.
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
