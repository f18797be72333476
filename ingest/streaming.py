"""`POST /v1/events/{stream}:stream`: NDJSON in, chunked; a result line out per event, in order, once acknowledged.

The answer starts (200) once the request is authorized; from then on each event's fate is its
own line, `{"index": N, ...}` with the result a batch answer would hold, in the order the
events came. The events of each received chunk are produced together; their lines are
written once Kafka acknowledged them and then their accepted facts (`ingest.accepted`), while
the next chunks are read and produced (at most `MAX_PENDING_GROUPS` groups wait for their
acknowledgement: beyond, reading pauses).

The last line is `{"end": true, "accepted": A, "rejected": R}`, with `"error"` and
`"retry_after_s"` when Kafka stopped acknowledging (no event after the last result line is
promised: resend from there), `"draining": true` when the process is stopping (the rest of
the stream was not read: send it to another process), or `"idle": true` when no body bytes came
for `body_timeout_s` (a silent sender holds no place in flight for longer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from config.streams import Stream
from hifi.errors import BrokerUnavailable, RequestRefused
from hifi.vocabulary import Rejection
from ingest import bodies, metrics
from ingest.answers import NDJSON_TYPE, accepted, line, rejected, result_line
from ingest.batch import KAFKA_RETRY_AFTER_S, Request, count
from ingest.events import Checked, Refused
from ingest.shared import Shared

log = structlog.get_logger(__name__)

MAX_PENDING_GROUPS = 64


@dataclass(slots=True)
class _Group:
    """The events of one received chunk: checked, and (when any is valid) their acknowledgement."""

    first_index: int
    checked: list[Checked | Refused]
    arrival_ms: int
    acknowledged: Awaitable[Sequence[Any]] | None


@dataclass(slots=True)
class _End:
    error: str | None = None
    draining: bool = False
    idle: bool = False


class _Lines:
    """Splits a chunked body into lines; a line longer than `max_bytes` is refused whole."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._partial = b""
        self._skipping = False  # inside a line already refused as too large

    def feed(self, chunk: bytes, *, last: bool) -> list[bytes | None]:
        """The complete lines in `chunk` (None for one that was too large)."""
        pieces = (self._partial + chunk).split(b"\n")
        self._partial = b"" if last else pieces.pop()
        found: list[bytes | None] = []
        for piece in pieces:
            if self._skipping:
                self._skipping = False
                continue
            if len(piece) > self._max_bytes:
                found.append(None)
            elif piece.strip():
                found.append(piece)
        if len(self._partial) > self._max_bytes:
            self._partial, self._skipping = b"", True
            found.append(None)
        return found


async def handle_stream(shared: Shared, stream: Stream, request: Request) -> None:
    """Serve one streamed request to its end (its answer is sent here, line by line)."""
    if bodies.body_format(request.header(b"content-type")) is not bodies.BodyFormat.NDJSON:
        raise RequestRefused("a streamed request is NDJSON: application/x-ndjson", status=415)
    if bodies.is_gzip(request.header(b"content-encoding")):
        raise RequestRefused("a streamed request takes no Content-Encoding", status=415)
    await request.send({"type": "http.response.start", "status": 200, "headers": [NDJSON_TYPE]})
    groups: asyncio.Queue[_Group | _End] = asyncio.Queue(MAX_PENDING_GROUPS)
    reading = asyncio.create_task(_read(shared, stream, request, groups), name="ingest-stream")
    try:
        taken, refused, end = await _answer(shared, stream, request, groups)
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
    summary: dict[str, Any] = {"end": True, "accepted": taken, "rejected": refused}
    if end.error is not None:
        summary.update(error=end.error, retry_after_s=KAFKA_RETRY_AFTER_S)
    if end.draining:
        summary["draining"] = True
    if end.idle:
        summary["idle"] = True
    await request.send({"type": "http.response.body", "body": line(summary)})


async def _read(
    shared: Shared, stream: Stream, request: Request, groups: asyncio.Queue[_Group | _End]
) -> None:
    """Read the body chunk by chunk, produce each chunk's valid events, queue them in order;
    whatever ends it, the last thing queued is an `_End`."""
    try:
        await _read_groups(shared, stream, request, groups)
    except Exception as exc:  # surfaced as the stream's end, and logged with its traceback
        log.exception("stream_read_failed", stream=stream.name)
        await groups.put(_End(error=f"the service failed reading the stream: {type(exc).__name__}"))


async def _read_groups(
    shared: Shared, stream: Stream, request: Request, groups: asyncio.Queue[_Group | _End]
) -> None:
    reader = shared.readers[stream.name]
    lines = _Lines(stream.max_event_bytes)
    index = 0
    more = True
    while more:
        message = await _next_message(request, shared.admission.drain, shared.body_timeout_s)
        if message is None:
            draining = shared.admission.draining
            await groups.put(_End(draining=draining, idle=not draining))
            return
        more = message["type"] != "http.disconnect" and bool(message.get("more_body", False))
        found = lines.feed(message.get("body", b""), last=not more)
        if not found:
            continue
        checked = [_too_large(stream) if raw is None else reader.read(raw) for raw in found]
        arrival_ms = int(time.time() * 1000)
        records = [e.record(stream.topic) for e in checked if isinstance(e, Checked)]
        try:
            pending = await shared.acks.append(records, arrival_ms) if records else None
        except BrokerUnavailable as exc:
            await groups.put(_End(error=_kafka_error(exc)))
            return
        await groups.put(_Group(index, checked, arrival_ms, pending))
        index += len(checked)
    await groups.put(_End())


async def _next_message(
    request: Request, drain: asyncio.Event, idle_s: float
) -> MutableMapping[str, Any] | None:
    """The next message of the request body; None once the process drains or nothing came for
    `idle_s` (the rest of the body is left unread: the sender sends it again, elsewhere)."""
    if drain.is_set():
        return None
    receiving = asyncio.ensure_future(request.receive())
    draining = asyncio.ensure_future(drain.wait())
    try:
        await asyncio.wait(
            [receiving, draining], timeout=idle_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in (receiving, draining):
            if not waiter.done():
                waiter.cancel()
    return receiving.result() if receiving.done() and not receiving.cancelled() else None


async def _answer(
    shared: Shared, stream: Stream, request: Request, groups: asyncio.Queue[_Group | _End]
) -> tuple[int, int, _End]:
    """Write each group's result lines once it and its accepted facts are acknowledged; the
    counts and how it ended."""
    taken = refused = 0
    while True:
        group = await groups.get()
        if isinstance(group, _End):
            return taken, refused, group
        pending = group.acknowledged
        try:
            written = await shared.acks.acknowledged(pending) if pending is not None else []
            valid = [event for event in group.checked if isinstance(event, Checked)]
            await shared.accepted.write(stream, valid, written, group.arrival_ms)
        except BrokerUnavailable as exc:
            return taken, refused, _End(error=_kafka_error(exc))
        places = iter(written)
        out = []
        for offset, event in enumerate(group.checked):
            result = (
                accepted(event, next(places)) if isinstance(event, Checked) else rejected(event)
            )
            out.append(result_line(group.first_index + offset, result))
        count(stream, group.checked, group.arrival_ms)
        taken += len(written)
        refused += len(group.checked) - len(written)
        await request.send({"type": "http.response.body", "body": b"".join(out), "more_body": True})


def _too_large(stream: Stream) -> Refused:
    return Refused(Rejection.TOO_LARGE, f"line is over max_event_bytes={stream.max_event_bytes}")


def _kafka_error(exc: BrokerUnavailable) -> str:
    log.warning("kafka_not_acknowledged", error=str(exc))
    metrics.SHED.labels("kafka").inc()
    return "Kafka did not acknowledge the events after the last result line; resend from there"
