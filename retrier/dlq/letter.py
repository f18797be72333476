"""One record of NAME.dlq as the dead-letter index keeps it: its fields, its search text and its row, masked."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from hifi.headers import (
    HDR_ATTEMPT,
    HDR_DEST,
    HDR_DUE_MS,
    HDR_ERROR,
    HDR_EVENT_ID,
    HDR_EVENT_TIME_MS,
    HDR_FIRST_FAILURE_MS,
    HDR_HANDOFF_MS,
    HDR_HISTORY,
    HDR_ORIGIN,
    HDR_REASON,
    HDR_STATUS,
    HDR_VALUE_BYTES,
)
from hifi.redaction import excerpt, mask, short_error
from hifi.vocabulary import Reason

UNKNOWN = "unknown"  # the reason of a letter without a known `hifi-reason`, or that cannot be read
#: every reason a letter can have in the index, by code (the position in this tuple)
REASONS: tuple[str, ...] = (*(reason.value for reason in Reason), UNKNOWN)
SEARCHED_BODY_CHARS = 1024  # the start of the body a text query looks in
SEARCHED_HEADER_CHARS = 1024  # the start of each other header value a text query looks in
EXCERPT_CHARS = 120
NO_STATUS = "-"
FIELD_SEPARATOR = "\x1f"  # between the fields of a search text, so no match spans two of them

_CODES = {reason: code for code, reason in enumerate(REASONS)}
# Decoded of a body: its searched start, and beyond it enough for masking to see a whole secret.
_DECODED_BODY_BYTES = 64 * 1024
_FIELD_HEADERS = frozenset({HDR_EVENT_ID, HDR_ORIGIN, HDR_REASON, HDR_STATUS, HDR_ERROR})
# Not in the search text: counts and times (the time filter covers when a letter died) and the
# destination, the same for every letter of an index. A text query reads every byte of every
# search text, so each byte left out is time saved on every query.
_UNSEARCHED_HEADERS = _FIELD_HEADERS | {
    HDR_DEST,
    HDR_ATTEMPT,
    HDR_FIRST_FAILURE_MS,
    HDR_HANDOFF_MS,
    HDR_DUE_MS,
    HDR_VALUE_BYTES,
    HDR_EVENT_TIME_MS,
}
# What makes one failure differ from the next of the same kind: ids, numbers, times.
# the note a connector adds to a group it dead-lettered whole once its bisection budget ran out:
# its size varies, the failure does not
_GROUP_NOTE = re.compile(r"\s*\(in a rejected group of \d+.*$")
_VARIABLE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|\b(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{12,}\b"
    r"|\d{4,}"
)


@dataclass(frozen=True, slots=True)
class Letter:
    """What the index keeps of one dead letter; every text is masked."""

    partition: int
    offset: int
    dead_ms: int  # the record's timestamp: when it was dead-lettered
    reason: int  # a code: the position of its reason in `REASONS`
    status: str  # the destination's HTTP status, or "-"
    error: str  # `short_error` of `hifi-error`
    event_id: str  # "" when the letter carries no event id
    origin: str  # topic/partition/offset where the event first entered hifi
    text: bytes  # the search text: lower-cased UTF-8, fields apart by FIELD_SEPARATOR
    row: bytes  # what a listed row shows that is not in a column (`encode_row`)

    @property
    def failure(self) -> tuple[str, str]:
        """The group of failures this letter counts in: its status and its error, ids and the
        rejected group's size left out (one outage is one group)."""
        return self.status, _VARIABLE.sub("#", _GROUP_NOTE.sub("", self.error))


_row = msgspec.json.Decoder(tuple[str, str, str, str, str])
_entries = msgspec.json.Decoder(list[Any])


def read_letter(record: Any) -> Letter:
    """The index's view of one record of NAME.dlq; one that cannot be read is reason "unknown"."""
    try:
        return _read(record)
    except Exception as exc:  # a record the index cannot read is still listed, never a crash
        return _unreadable(record, exc)


def decode_row(raw: bytes) -> tuple[str, str, str, str, str]:
    """(event id, origin, status, error, excerpt) of a row written by `read_letter`."""
    return _row.decode(raw)


def _read(record: Any) -> Letter:
    headers: dict[str, str] = {}
    for name, raw in record.headers or ():
        if raw is not None:
            headers[str(name)] = bytes(raw).decode("utf-8", errors="replace")
    reason = headers.get(HDR_REASON, UNKNOWN)
    origin = headers.get(HDR_ORIGIN) or f"{record.topic}/{record.partition}/{record.offset}"
    others = [
        f"{name}={_failures_in(text) if name == HDR_HISTORY else text}"
        for name, text in headers.items()
        if name not in _UNSEARCHED_HEADERS
    ]
    plain = [headers.get(HDR_EVENT_ID, ""), origin, reason, headers.get(HDR_STATUS) or NO_STATUS]
    event_id, origin, masked_reason, status, *masked_others = _masked_together([*plain, *others])
    error = short_error(headers.get(HDR_ERROR, ""))
    value = record.value
    body = bytes(value[:_DECODED_BODY_BYTES]).decode("utf-8", errors="replace") if value else ""
    searched_body = excerpt(body, SEARCHED_BODY_CHARS)
    searched_others = [other[:SEARCHED_HEADER_CHARS] for other in masked_others]
    fields = [event_id, origin, masked_reason, status, error, *searched_others, searched_body]
    return Letter(
        partition=int(record.partition),
        offset=int(record.offset),
        dead_ms=_int_or(record.timestamp, 0),
        reason=_CODES.get(reason, _CODES[UNKNOWN]),
        status=status,
        error=error,
        event_id=event_id,
        origin=origin,
        text=search_text(fields),
        row=orjson.dumps([event_id, origin, status, error, _excerpt(searched_body)]),
    )


def _failures_in(history: str) -> str:
    """The distinct "status error" of a `hifi-history` (usually one failure, repeated)."""
    try:
        entries = _entries.decode(history)
    except (msgspec.DecodeError, RecursionError):  # not JSON, not a list, nested too deep
        return history
    failures = (
        f"{entry.get('status') or NO_STATUS} {entry.get('error') or ''}"
        for entry in entries
        if isinstance(entry, dict)
    )
    return " | ".join(dict.fromkeys(failures))


def _masked_together(texts: list[str]) -> list[str]:
    """Each text masked, in one call for all (masking has a cost per call); a separator inside a
    text is made a space first, so the masked texts come apart where they were joined."""
    joined = FIELD_SEPARATOR.join(text.replace(FIELD_SEPARATOR, " ") for text in texts)
    parts = mask(joined).split(FIELD_SEPARATOR)
    if len(parts) != len(texts):  # a secret with the separator in it: mask each on its own
        return [mask(text) for text in texts]
    return parts


def search_text(masked_fields: list[str]) -> bytes:
    """Fields, each masked already, as one search text: lower-case, no separator inside a field."""
    text = FIELD_SEPARATOR.join(field.replace(FIELD_SEPARATOR, " ") for field in masked_fields)
    return text.lower().encode("utf-8", errors="replace")


def _excerpt(masked_body: str) -> str:
    """The body's start on one line, from the masked body and masked again once cut (a run of
    white space made one space can form a registered secret's one-space form)."""
    line = " ".join(masked_body[: EXCERPT_CHARS * 4].split())
    if len(line) > EXCERPT_CHARS:
        line = line[: EXCERPT_CHARS - 3] + "..."
    return mask(line)


def _unreadable(record: Any, exc: Exception) -> Letter:
    """A letter for a record whose fields cannot be read: listed by its position, reason unknown."""
    partition, offset, dead_ms = (
        _int_or(getattr(record, name, None), default) for name, default in _POSITION
    )
    error = short_error(f"dead letter cannot be read: {type(exc).__name__}: {exc}")
    origin = mask(f"{getattr(record, 'topic', '?')}/{partition}/{offset}")
    return Letter(
        partition=partition,
        offset=offset,
        dead_ms=dead_ms,
        reason=_CODES[UNKNOWN],
        status=NO_STATUS,
        error=error,
        event_id="",
        origin=origin,
        text=search_text(["", origin, UNKNOWN, NO_STATUS, error, ""]),
        row=orjson.dumps(["", origin, NO_STATUS, error, ""]),
    )


_POSITION = (("partition", -1), ("offset", -1), ("timestamp", 0))


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
