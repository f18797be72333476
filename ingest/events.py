"""One event of a request: checked, given an id when it has none, and made the Kafka record the connector reads.

The record is what any producer of a source topic writes and `hifi.envelope.parse_records`
reads: the value is the event's JSON object as it came (only an id written in when it had
none), keyed by its id so a resent event lands on the partition of its first copy. Its
timestamp is the arrival time; an event without a readable time carries `hifi-event-time:
arrival`, and the connector and the auditor then take the record's timestamp as its time, as
they would for any record.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import orjson

from config.streams import Stream
from hifi.envelope import parse_event_time
from hifi.headers import HDR_EVENT_TIME
from hifi.kafka.clients import Headers, Record
from hifi.vocabulary import EventTimeFrom, Rejection

_MAX_INT_ID = 10**38  # as hifi.envelope: a numeric id beyond 128 bits is not an id
_ARRIVAL_HEADERS: Headers = [(HDR_EVENT_TIME, EventTimeFrom.ARRIVAL.value.encode())]
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])  # one JSON object, values unread


@dataclass(frozen=True, slots=True)
class Checked:
    """An event to produce: its id, its value (with the id written in if it was generated) and
    its time in epoch ms (None: it had none readable, the arrival time stands in)."""

    id: str
    id_generated: bool
    value: bytes
    event_time_ms: int | None

    def record(self, topic: str) -> Record:
        """The Kafka record: keyed by the id, flagged when its time is the arrival time."""
        headers = _ARRIVAL_HEADERS if self.event_time_ms is None else []
        return (topic, self.id.encode(), self.value, headers)


@dataclass(frozen=True, slots=True)
class Refused:
    """An event that is not produced, and why (a one-line `error` for the sender)."""

    reason: Rejection
    error: str


class _Fields(Protocol):
    id: Any
    event_time: Any


class EventReader:
    """Reads the events of one stream: only the id and time fields become Python objects; the
    rest of each event is checked as JSON and left as its bytes."""

    def __init__(self, stream: Stream) -> None:
        self._id_field = stream.id_field
        self._decode = _fields_decoder(stream.id_field, stream.event_time_field).decode
        self._id_key = orjson.dumps(stream.id_field)

    def read(self, raw: bytes) -> Checked | Refused:
        """One event's bytes (a JSON object, surrounding whitespace allowed) checked."""
        try:
            if not raw.isascii():
                raw.decode()  # the decoder skips the text of unread fields; JSON is UTF-8
            fields: _Fields = self._decode(raw)
        except Exception as exc:  # whatever one event's bytes do, it is that event's refusal
            return _refusal(exc)
        event_id, generated = fields.id, False
        if event_id is msgspec.UNSET or event_id is None:
            event_id, generated = uuid.uuid4().hex, True
            written = self._with_id(raw, event_id, present=fields.id is None)
            if isinstance(written, Refused):
                return written
            raw = written
        elif type(event_id) is not str or not event_id:
            event_id = _as_id(event_id)
            if event_id is None:
                return Refused(
                    Rejection.INVALID_ID,
                    f"field {self._id_field!r} holds {_kind(fields.id)}; give a non-empty string"
                    " or an integer, or leave it out to have one generated",
                )
        time = fields.event_time
        event_time_ms = None if time is msgspec.UNSET else parse_event_time(time)
        return Checked(event_id, generated, raw.strip(), event_time_ms)

    def _with_id(self, raw: bytes, event_id: str, *, present: bool) -> bytes | Refused:
        """The event with `event_id` in its id field: written after the opening brace when the
        field is absent (the rest left byte for byte), set in place when it is null."""
        if not present:
            body = raw.strip()[1:].lstrip()
            comma = b"" if body.startswith(b"}") else b","
            return b"{" + self._id_key + b":" + orjson.dumps(event_id) + comma + body
        try:  # the members as their raw bytes: every other value stays as it came
            members = _MEMBERS.decode(raw)
        except Exception as exc:  # whatever one event's bytes do, it is that event's refusal
            return Refused(Rejection.INVALID_ID, f"id is null and cannot be set: {exc}")
        members[self._id_field] = msgspec.Raw(orjson.dumps(event_id))
        return b"{" + b",".join(orjson.dumps(k) + b":" + v for k, v in members.items()) + b"}"


@functools.cache
def _fields_decoder(id_field: str, event_time_field: str) -> msgspec.json.Decoder[_Fields]:
    """A decoder that checks a whole JSON object and builds only its id and time fields; a
    field that is absent stays `msgspec.UNSET` (null is None)."""
    fields = msgspec.defstruct(
        "IngestFields",
        [("id", Any, msgspec.UNSET), ("event_time", Any, msgspec.UNSET)],
        rename={"id": id_field, "event_time": event_time_field},
        gc=False,
    )
    return msgspec.json.Decoder(fields)


def _refusal(exc: Exception) -> Refused:
    if isinstance(exc, UnicodeDecodeError):
        return Refused(Rejection.NOT_UTF8, f"not UTF-8: {exc.reason} at byte {exc.start}")
    if isinstance(exc, RecursionError):
        return Refused(Rejection.NOT_JSON, "nests deeper than the parser allows")
    text = str(exc)
    if text.startswith("Expected `object`, got `"):
        kind = text.removeprefix("Expected `object`, got `").partition("`")[0]
        return Refused(Rejection.NOT_AN_OBJECT, f"JSON {kind}, not an object")
    if isinstance(exc, msgspec.ValidationError):  # a number out of range in a read field
        return Refused(Rejection.NOT_JSON, f"cannot be read: {text}")
    return Refused(Rejection.NOT_JSON, f"not JSON: {text}")


def _as_id(raw: Any) -> str | None:
    if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) < _MAX_INT_ID:
        return str(raw)
    return None


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "an empty string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer beyond 128 bits"
    return {float: "a number with a fraction", list: "an array", dict: "an object"}.get(
        type(value), f"a {type(value).__name__}"
    )
