"""What the ingest service answers: a result per event, in order, and the status of the whole request.

    200  every event accepted (acknowledged by Kafka)
    207  some accepted, some rejected: every event listed as accepted is in Kafka, resend none
    400  none accepted: every event rejected, or the body holds no events
    4xx  the request refused as a whole (`RequestRefused`): {"error": ..., "limit": ...}
    503  nothing promised: resend the whole request after Retry-After

An accepted event's result: `{"status": "accepted", "id", "partition", "offset"}`, with
`"id_generated": true` when the service gave it its id and `"event_time": "arrival"` when it
had no readable time; a rejected one's: `{"status": "rejected", "reason", "error"}`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hifi.errors import RequestRefused
from hifi.vocabulary import EventTimeFrom
from ingest.events import Checked, Refused

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
JSON_TYPE = (b"content-type", b"application/json")
NDJSON_TYPE = (b"content-type", b"application/x-ndjson")
_encode = orjson.dumps


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole response: status, JSON body and extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()

    @classmethod
    def refusing(cls, exc: RequestRefused) -> Answer:
        """The answer to a request refused as a whole."""
        return cls(exc.status, error_body(str(exc), limit=exc.limit), exc.headers)

    def with_header(self, name: bytes, value: bytes) -> Answer:
        return Answer(self.status, self.body, (*self.headers, (name, value)))


@dataclass(frozen=True, slots=True)
class Written:
    """Where Kafka acknowledged an event."""

    partition: int
    offset: int


def accepted(event: Checked, written: Written) -> dict[str, Any]:
    result: dict[str, Any] = {
        "status": "accepted",
        "id": event.id,
        "partition": written.partition,
        "offset": written.offset,
    }
    if event.id_generated:
        result["id_generated"] = True
    if event.event_time_ms is None:
        result["event_time"] = EventTimeFrom.ARRIVAL.value
    return result


def rejected(refused: Refused) -> dict[str, Any]:
    return {"status": "rejected", "reason": refused.reason.value, "error": refused.error}


def batch_answer(results: Sequence[dict[str, Any]]) -> Answer:
    """The answer to a request whose events were each accepted or rejected."""
    taken = sum(1 for result in results if result["status"] == "accepted")
    status = 200 if taken == len(results) else 207 if taken else 400
    body = {"accepted": taken, "rejected": len(results) - taken, "results": results}
    return Answer(status, _encode(body))


def error_body(message: str, *, limit: str | None = None) -> bytes:
    body: dict[str, Any] = {"error": message}
    if limit is not None:
        body["limit"] = limit
    return _encode(body)


def result_line(index: int, result: dict[str, Any]) -> bytes:
    """One line of a streamed answer: the event's index in the stream, then its result."""
    return _encode({"index": index, **result}) + b"\n"


def line(body: dict[str, Any]) -> bytes:
    return _encode(body) + b"\n"


async def send_answer(send: Send, answer: Answer) -> None:
    """A whole JSON response."""
    length = (b"content-length", str(len(answer.body)).encode())
    await send(
        {
            "type": "http.response.start",
            "status": answer.status,
            "headers": [JSON_TYPE, length, *answer.headers],
        }
    )
    await send({"type": "http.response.body", "body": answer.body})
