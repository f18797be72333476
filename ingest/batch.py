"""`POST /v1/events/{stream}`: events checked, the valid ones produced, answered once they and their facts are acked."""

from __future__ import annotations

import time
from typing import Any

import structlog

from config.streams import Stream
from hifi.errors import BrokerUnavailable, RequestRefused
from ingest import bodies, metrics
from ingest.answers import Answer, Send, accepted, batch_answer, error_body, rejected
from ingest.events import Checked, Refused
from ingest.idempotency import HEADER, STATUS_HEADER, KeyStatus
from ingest.shared import Shared

log = structlog.get_logger(__name__)

KAFKA_RETRY_AFTER_S = 2


class Request:
    """The parts of an ASGI request a handler reads."""

    def __init__(self, scope: dict[str, Any], receive: bodies.Receive, send: Send) -> None:
        self.headers: dict[bytes, bytes] = dict(scope["headers"])
        self.receive = receive
        self.send = send

    def header(self, name: bytes) -> bytes | None:
        return self.headers.get(name)

    def content_length(self) -> int | None:
        """The `Content-Length` header; 400 when it is not a number."""
        raw = self.headers.get(b"content-length")
        if raw is None:
            return None
        if not raw.strip().isdigit():
            raise RequestRefused("Content-Length is not a number", status=400)
        return int(raw)


async def handle_batch(shared: Shared, stream: Stream, request: Request) -> Answer:
    """Read, check and produce one request's events: the answer to send once every accepted
    event, and its accepted fact, is acknowledged. A `RequestRefused` raised before its body is read (415, 413) is
    the caller's to answer."""
    kind = bodies.body_format(request.header(b"content-type"))
    gzipped = bodies.is_gzip(request.header(b"content-encoding"))
    body = await bodies.read_body(
        request.receive, stream, request.content_length(), timeout_s=shared.body_timeout_s
    )
    read_at = time.monotonic()
    try:
        if gzipped:
            body = bodies.gunzip(body, stream)
        answer = await _answer_once(shared, stream, request.header(HEADER), body, kind)
    except RequestRefused as exc:
        answer = Answer.refusing(exc)
    metrics.INGEST_TIME.labels(stream.name).observe(time.monotonic() - read_at)
    return answer


async def _answer_once(
    shared: Shared, stream: Stream, key: bytes | None, body: bytes, kind: bodies.BodyFormat
) -> Answer:
    """The answer, produced once per `Idempotency-Key` within the stream's window."""
    if key is None:
        return await _answer(shared, stream, body, kind)
    if shared.idempotency is None:  # no Redis configured
        answer, status = await _answer(shared, stream, body, kind), KeyStatus.UNAVAILABLE
    else:
        claim = await shared.idempotency.claim(stream, key, body)
        if claim.replay is not None:
            answer, status = claim.replay, KeyStatus.REPLAYED
        else:
            answer = await _answer(shared, stream, body, kind)
            status = await shared.idempotency.settle(claim, answer, stream)
    metrics.IDEMPOTENCY.labels(status.value).inc()
    return answer.with_header(STATUS_HEADER, status.encode())


async def _answer(shared: Shared, stream: Stream, body: bytes, kind: bodies.BodyFormat) -> Answer:
    try:
        return await _produce_body(shared, stream, body, kind)
    except RequestRefused as exc:
        return Answer.refusing(exc)


async def _produce_body(
    shared: Shared, stream: Stream, body: bytes, kind: bodies.BodyFormat
) -> Answer:
    arrival_ms = int(time.time() * 1000)
    reader = shared.readers[stream.name]
    checked = [reader.read(raw) for raw in bodies.split_events(body, kind, stream)]
    valid = [event for event in checked if isinstance(event, Checked)]
    try:
        records = [event.record(stream.topic) for event in valid]
        written = await shared.acks.write(records, arrival_ms) if records else []
        await shared.accepted.write(stream, valid, written, arrival_ms)
    except BrokerUnavailable as exc:
        log.warning("kafka_not_acknowledged", stream=stream.name, events=len(valid), error=str(exc))
        metrics.SHED.labels("kafka").inc()
        return kafka_unavailable()
    places = iter(written)
    results = [
        accepted(event, next(places)) if isinstance(event, Checked) else rejected(event)
        for event in checked
    ]
    count(stream, checked, arrival_ms)
    return batch_answer(results)


def kafka_unavailable() -> Answer:
    """503: Kafka did not acknowledge every event, or their accepted facts; the sender resends
    the whole request."""
    return Answer(
        503,
        error_body(
            "Kafka did not acknowledge the events; nothing is promised: resend the whole"
            f" request after {KAFKA_RETRY_AFTER_S} s"
        ),
        ((b"retry-after", str(KAFKA_RETRY_AFTER_S).encode()),),
    )


def count(stream: Stream, checked: list[Checked | Refused], arrival_ms: int) -> None:
    """Count answered events, and the lag-in of those accepted with a time of their own."""
    taken = 0
    lag = metrics.LAG_IN.labels(stream.name)
    for event in checked:
        if isinstance(event, Refused):
            metrics.EVENTS_REJECTED.labels(stream.name, event.reason.value).inc()
            continue
        taken += 1
        if event.event_time_ms is not None:
            lag.observe(max(0.0, (arrival_ms - event.event_time_ms) / 1000))
    if taken:
        metrics.EVENTS_ACCEPTED.labels(stream.name).inc(taken)
