"""A request's body as events: read within the stream's limit, gunzipped within it too, split by its content type.

Every way a body can be wrong is a `RequestRefused` with its 4xx and one line saying what and
where: 415 for a content type or encoding it cannot read, 413 naming the limit a body is over
(the compressed bytes and the gunzipped bytes alike: a zip bomb stops at the limit), 400 for
a body that holds no events. The events themselves are checked one by one (`ingest.events`).
"""

from __future__ import annotations

import asyncio
import enum
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec

from config.streams import Stream
from hifi.errors import RequestRefused

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]

_GZIP_WBITS = 31  # zlib's window bits for the gzip wrapper
_GUNZIP_STEP_BYTES = 256 * 1024
_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])
JSON_TYPES = ("application/json",)
NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl")


class BodyFormat(enum.Enum):
    """How a body holds its events."""

    JSON = "json"  #: one JSON object, or a JSON array of objects
    NDJSON = "ndjson"  #: one JSON object per line


def body_format(content_type: bytes | None) -> BodyFormat:
    """The format a `Content-Type` names; 415 for any other (a charset other than UTF-8 too)."""
    kind, _, params = (content_type or b"").decode("latin-1").partition(";")
    kind = kind.strip().lower()
    charset = params.strip().lower().removeprefix("charset=").strip('"')
    if charset and charset not in ("utf-8", "utf8"):
        raise _unsupported(f"charset {charset!r}; events are UTF-8 JSON")
    if kind in JSON_TYPES:
        return BodyFormat.JSON
    if kind in NDJSON_TYPES:
        return BodyFormat.NDJSON
    raise _unsupported(f"Content-Type {kind!r}" if kind else "no Content-Type")


def _unsupported(what: str) -> RequestRefused:
    accepted = ", ".join((*JSON_TYPES, *NDJSON_TYPES))
    return RequestRefused(f"{what}: send one of {accepted}", status=415)


def is_gzip(content_encoding: bytes | None) -> bool:
    """True for `gzip`, False without an encoding (or `identity`); 415 for any other."""
    encoding = (content_encoding or b"").decode("latin-1").strip().lower()
    if encoding in ("", "identity"):
        return False
    if encoding in ("gzip", "x-gzip"):
        return True
    raise RequestRefused(f"Content-Encoding {encoding!r}: send gzip or no encoding", status=415)


def over_body_limit(stream: Stream, *, gunzipped: bool) -> RequestRefused:
    after = " once gunzipped" if gunzipped else ""
    return RequestRefused(
        f"body is over max_body_bytes={stream.max_body_bytes}{after}",
        status=413,
        limit="max_body_bytes",
    )


async def read_body(
    receive: Receive, stream: Stream, content_length: int | None, *, timeout_s: float
) -> bytes:
    """The whole body, refused with 413 as soon as it is known to be over `max_body_bytes`, and
    with 408 when it has not all arrived within `timeout_s` (a slow sender holds no place in
    flight for longer)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body(receive, stream, content_length)
    except TimeoutError:
        raise RequestRefused(
            f"the body did not arrive within {timeout_s:g} s", status=408
        ) from None


async def _read_body(receive: Receive, stream: Stream, content_length: int | None) -> bytes:
    limit = stream.max_body_bytes
    if content_length is not None and content_length > limit:
        raise over_body_limit(stream, gunzipped=False)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestRefused("the client closed the connection mid-body", status=400)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise over_body_limit(stream, gunzipped=False)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def gunzip(data: bytes, stream: Stream) -> bytes:
    """`data` gunzipped (several gzip members in a row too), refused with 413 as soon as the
    output passes `max_body_bytes` and with 400 when it is not gzip or cut short."""
    limit = stream.max_body_bytes
    out: list[bytes] = []
    size = 0
    while data:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        try:
            while data and not inflater.eof:
                piece = inflater.decompress(data, _GUNZIP_STEP_BYTES)
                size += len(piece)
                if size > limit:
                    raise over_body_limit(stream, gunzipped=True)
                out.append(piece)
                data = inflater.unconsumed_tail
        except zlib.error as exc:
            raise RequestRefused(f"body is not valid gzip: {exc}", status=400) from None
        if not inflater.eof:
            raise RequestRefused("gzip body is cut short (no end of stream)", status=400)
        data = inflater.unused_data
    return b"".join(out)


def split_events(body: bytes, kind: BodyFormat, stream: Stream) -> list[bytes]:
    """The bytes of each event of the body, in order, checked against the stream's count and
    size limits (413); 400 for a body that holds no events or is not a JSON object or array."""
    events = _ndjson_events(body) if kind is BodyFormat.NDJSON else _json_events(body)
    if not events:
        raise RequestRefused("body holds no events", status=400)
    if len(events) > stream.max_events_per_request:
        raise RequestRefused(
            f"{len(events)} events, over max_events_per_request={stream.max_events_per_request}",
            status=413,
            limit="max_events_per_request",
        )
    for index, event in enumerate(events):
        if len(event) > stream.max_event_bytes:
            raise RequestRefused(
                f"event {index} is {len(event)} bytes, over max_event_bytes"
                f"={stream.max_event_bytes}",
                status=413,
                limit="max_event_bytes",
            )
    return events


def _ndjson_events(body: bytes) -> list[bytes]:
    return [line for line in body.split(b"\n") if line.strip()]


def _json_events(body: bytes) -> list[bytes]:
    text = body.strip()
    if not text:
        raise RequestRefused("body is empty", status=400)
    if text.startswith(b"{"):
        return [text]  # checked as an event: its own result says what is wrong with it
    if not text.startswith(b"["):
        raise RequestRefused(
            "an application/json body is one JSON object or an array of objects", status=400
        )
    try:
        return [bytes(event) for event in _ARRAY.decode(text)]
    except RecursionError:
        raise RequestRefused("body nests deeper than the parser allows", status=400) from None
    except msgspec.DecodeError as exc:
        raise RequestRefused(f"body is not a JSON array: {exc}", status=400) from None
