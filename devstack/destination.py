"""A scriptable HTTP/1.1 destination on loopback that records the batches of JSON events it gets."""

from __future__ import annotations

import asyncio
import gzip
import math
import random
import ssl
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import h11
import msgspec
import orjson

from devstack.destination_script import Decision, Delivery, ReceivedRequest, Reply, Script

__all__ = ["Delivery", "DeliveryHook", "Echo", "ReceivedRequest", "Reply", "TestDestination"]

DeliveryHook = Callable[[Sequence[Delivery]], None]
"""Called synchronously with the deliveries of each request right after its 2xx answer is sent."""

_READ_SIZE = 256 * 1024
_STREAM_LIMIT = 1024 * 1024
_MAX_HEADER_BYTES = 64 * 1024
_BACKLOG = 1024
_NDJSON = "application/x-ndjson"
_OVER_CAPACITY = Decision(Reply(503), "over capacity")


@dataclass(frozen=True)
class Echo:
    """How error replies (3xx to 5xx) echo the request's credentials, as careless servers do.

    The echoed text is `text` when set, else the request's `Authorization` value, or with
    `token_only` its last word alone (the bare token of "Bearer TOKEN"). It is sent:
    - in the body: `{"error": "STATUS: REASON", "echo": TEXT}` with `/` written `\\/` (as PHP's
      json_encode does), or with `raw_body` the text alone, as text/plain;
    - in a `WWW-Authenticate` header (`Bearer error="invalid_token", error_description="TEXT"`);
    - percent-encoded in the `Location` of a 3xx: `/login?token=TEXT`.
    """

    text: str | None = None
    token_only: bool = False
    raw_body: bool = False

    def of(self, headers: dict[str, str]) -> str:
        """The text to echo for a request with these (lower-cased) headers."""
        if self.text is not None:
            return self.text
        authorization = headers.get("authorization", "")
        words = authorization.split()
        return words[-1] if self.token_only and words else authorization


class _IdWaiter:
    """One `wait_for_ids` call: the ids still missing and the event set once none are."""

    __slots__ = ("done", "missing")

    def __init__(self, missing: set[str]) -> None:
        self.missing = missing
        self.done = asyncio.Event()


class TestDestination:
    """A real HTTP server that accepts batches of events and answers as scripted.

    With `ssl_context` (a server context, e.g. from `trustme`) it serves HTTPS, and `url` says so.

    Per request the reply is chosen by, in order: down (connection refused), `set_capacity`
    (503 beyond it), `reject_ids` / `reject_poison`, the `script` queue, random `set_faults`,
    else 200 `{"accepted": N}`; every answer after `set_latency`'s draw, if set.
    Error replies echo the request's credentials after `echo(Echo(...))`.

    What it records:
    - `requests`: every request read, in order of arrival, with the status it was answered
      (0 when dropped, or when the destination went down before a delayed answer was sent).
    - `deliveries()`: one `Delivery(id, received_ms, event_time)` per event answered 2xx, in
      order, duplicates kept; `delivered_ids()` is the ids alone. Kept even with
      `record_bodies=False`, which only drops bodies and parsed events from `requests`.
    - `keep_history=False` keeps neither (for long-running processes); `on_delivery` still
      sees every delivery and `wait_for_*` still work for what arrives after the call.
    """

    __test__ = False  # a fixture class, not a pytest test class despite its name

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        id_field: str = "id",
        record_bodies: bool = True,
        event_time_field: str = "event_time",
        keep_history: bool = True,
        on_delivery: DeliveryHook | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._host = host
        self._ssl_context = ssl_context  # a server context: serve HTTPS instead of HTTP
        self._port = port
        self._id_field = id_field
        self._event_time_field = event_time_field
        self._receipts = _Receipts(id_field, event_time_field)
        self._record_bodies = record_bodies
        self._keep_history = keep_history
        self._on_delivery = on_delivery
        self._script = Script()
        self._echo: Echo | None = None
        self._server: asyncio.Server | None = None
        self._serving = False
        self._connections: dict[asyncio.Task[object], asyncio.StreamWriter] = {}
        self._connections_opened = 0
        self._requests: list[ReceivedRequest] = []
        self._request_count = 0
        self._deliveries: list[Delivery] = []
        self._delivered: set[str] = set()
        self._id_waiters: list[_IdWaiter] = []
        self._count_waiters: list[tuple[int, asyncio.Event]] = []
        self._capacity: tuple[int, float] | None = None  # (max_concurrent, service_s)
        self._in_service = 0  # requests within the capacity being served now
        self.max_serving = 0  # the most served at once since start (with a capacity)
        self._latency_s: Callable[[], float] | None = None  # `set_latency`'s draw

    async def __aenter__(self) -> TestDestination:
        await self._listen()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop_listening()

    @property
    def port(self) -> int:
        """The TCP port, fixed at the first start (kept across `set_down`)."""
        if self._port == 0:
            raise RuntimeError("destination has no port yet; enter `async with` first")
        return self._port

    @property
    def url(self) -> str:
        """The events URL, e.g. http://127.0.0.1:PORT/v1/events (https with `ssl_context`)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        scheme = "http" if self._ssl_context is None else "https"
        return f"{scheme}://{host}:{self.port}/v1/events"

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of every request read since the last `clear`, in order of arrival."""
        return list(self._requests)

    @property
    def request_count(self) -> int:
        """How many requests were read since the last `clear` (kept even without history)."""
        return self._request_count

    @property
    def connections_opened(self) -> int:
        """How many TCP connections were accepted since start (to check keep-alive)."""
        return self._connections_opened

    def deliveries(self) -> list[Delivery]:
        """A copy of the per-event receipts of 2xx answers, in order, duplicates kept."""
        return list(self._deliveries)

    def delivered_ids(self) -> list[str]:
        """Ids of the events in requests answered 2xx, in order, duplicates kept."""
        return [delivery.id for delivery in self._deliveries]

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, one each; then default behaviour resumes."""
        self._script.enqueue(replies)

    def reject_ids(self, ids: Iterable[str], status: int = 400) -> None:
        """Answer `status` to any request containing one of `ids` (adds to earlier calls)."""
        self._script.reject_ids(ids, status)

    def reject_poison(self, field: str, status: int = 400) -> None:
        """Answer `status` to any request containing an event whose `field` is JSON true."""
        self._script.reject_poison(field, status)

    def set_faults(self, ratio: float, replies: Sequence[Reply], *, seed: int = 0) -> None:
        """Answer a seeded-random fraction `ratio` of requests with one of `replies`."""
        self._script.set_faults(ratio, replies, seed=seed)

    def set_capacity(self, max_concurrent: int | None, *, service_s: float = 0.0) -> None:
        """Serve at most `max_concurrent` requests at once, each for `service_s` before its reply
        is chosen; answer 503 at once to requests beyond them (None: no cap, no service time)."""
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"capacity {max_concurrent} is below 1; use None for no cap")
        if service_s < 0:
            raise ValueError(f"service_s {service_s} is negative; use 0 or more")
        self._capacity = None if max_concurrent is None else (max_concurrent, service_s)

    def set_latency(self, median_s: float, sigma: float = 0.0, *, seed: int = 0) -> None:
        """Take a log-normal time to answer every request (its median `median_s`; `sigma`, the
        spread of its log, makes the tail: 1.0 puts p99 near 10 times the median), seeded;
        `median_s` 0: answer at once, as by default."""
        if median_s < 0 or sigma < 0:
            raise ValueError(f"latency median {median_s} s, sigma {sigma}: use 0 or more")
        rng = random.Random(seed)
        mu = math.log(median_s) if median_s > 0 else 0.0
        self._latency_s = (lambda: rng.lognormvariate(mu, sigma)) if median_s > 0 else None

    def echo(self, echo: Echo | None) -> None:
        """From now on error replies (3xx to 5xx) echo credentials as `echo` says; None stops."""
        self._echo = echo

    def reset_script(self) -> None:
        """Forget queued replies, rejections and random faults: answer 200 from now on."""
        self._script.reset()

    @property
    def is_down(self) -> bool:
        """Whether the destination refuses connections (after `set_down(True)` or exit)."""
        return not self._serving

    async def set_down(self, down: bool) -> None:
        """Down: stop listening and close every connection. Up: listen again on the same port."""
        if down and self._serving:
            await self._stop_listening()
        elif not down and not self._serving:
            await self._listen()

    async def wait_for_ids(self, ids: Collection[str], timeout_s: float) -> bool:
        """Wait until every id was delivered (2xx) at least once; False on timeout."""
        waiter = _IdWaiter(set(ids) - self._delivered)
        if not waiter.missing:
            return True
        self._id_waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter.done.wait()
        except TimeoutError:
            return False
        finally:
            self._id_waiters.remove(waiter)
        return True

    async def wait_for_requests(self, count: int, timeout_s: float) -> bool:
        """Wait until `count` requests were read since the last `clear`; False on timeout."""
        if self._request_count >= count:
            return True
        entry = (count, asyncio.Event())
        self._count_waiters.append(entry)
        try:
            async with asyncio.timeout(timeout_s):
                await entry[1].wait()
        except TimeoutError:
            return False
        finally:
            self._count_waiters.remove(entry)
        return True

    def clear(self) -> None:
        """Forget recorded requests and deliveries (the script is kept)."""
        self._requests = []
        self._request_count = 0
        self._deliveries = []
        self._delivered = set()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._on_connection,
            self._host,
            self._port,
            limit=_STREAM_LIMIT,
            backlog=_BACKLOG,
            ssl=self._ssl_context,
        )
        if self._port == 0:
            self._port = int(self._server.sockets[0].getsockname()[1])
        self._serving = True

    async def _stop_listening(self) -> None:
        self._serving = False
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._connections)
        for task, writer in self._connections.items():
            writer.transport.abort()
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if not self._serving or task is None:
            writer.transport.abort()
            return
        self._connections[task] = writer
        self._connections_opened += 1
        try:
            await self._serve(reader, writer)
        except (ConnectionError, h11.RemoteProtocolError, asyncio.CancelledError):
            # the client went away or spoke broken HTTP: close the connection; or the server
            # stops: end quietly, as Python 3.11's stream callback would otherwise print a
            # traceback reading the cancelled task's exception (fixed in 3.12)
            pass
        finally:
            del self._connections[task]
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer requests on one connection until either side closes it."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEADER_BYTES)
        while True:
            received = await _read_request(conn, reader)
            if received is None:
                return
            keep_open = await self._answer_within_capacity(conn, writer, *received)
            if not keep_open or (conn.our_state, conn.their_state) != (h11.DONE, h11.DONE):
                return
            conn.start_next_cycle()

    async def _answer_within_capacity(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request, body: bytes
    ) -> bool:
        """`_answer`, after the service time within the capacity, or a 503 beyond it."""
        if self._capacity is None:
            return await self._answer(conn, writer, request, body)
        max_concurrent, service_s = self._capacity
        if self._in_service >= max_concurrent:
            return await self._answer(conn, writer, request, body, over_capacity=True)
        self._in_service += 1
        self.max_serving = max(self.max_serving, self._in_service)
        try:
            await asyncio.sleep(service_s)
            return await self._answer(conn, writer, request, body)
        finally:
            self._in_service -= 1

    async def _answer(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        body: bytes,
        *,
        over_capacity: bool = False,
    ) -> bool:
        """Record and answer one request; False when the connection must close."""
        received_ms = time.time_ns() // 1_000_000
        headers = _decode_headers(request.headers)
        payload = _decode_body(body, headers.get("content-encoding", ""))
        content_type = headers.get("content-type", "")
        # Receipts alone (ids and times, in C) unless the events are kept or a rule reads them
        fast = not self._record_bodies and not self._script.reads_events
        receipts = self._receipts.read(payload, content_type) if fast else None
        events: list[dict[str, object]] = []
        if receipts is None:
            events = _parse_events(payload, content_type)
            id_field, time_field = self._id_field, self._event_time_field
            with_id = [event for event in events if id_field in event]
            ids = tuple(str(event[id_field]) for event in with_id)
            times = [event.get(time_field) for event in with_id]
            count = len(events)
        else:
            ids, times = receipts
            count = len(ids)
        decision = _OVER_CAPACITY if over_capacity else self._script.choose(ids, events)
        reply = decision.reply
        record = ReceivedRequest(
            received_ms=received_ms,
            method=request.method.decode("ascii"),
            path=request.target.decode("latin-1"),
            headers=headers,
            body=payload if self._record_bodies else b"",
            events=events if self._record_bodies else [],
            status=0 if reply.drop else reply.status,
            ids=ids,
        )
        self._record_request(record)
        delay_s = reply.delay_s + (self._latency_s() if self._latency_s is not None else 0.0)
        try:
            if delay_s > 0:
                await asyncio.sleep(delay_s)
        except asyncio.CancelledError:
            self._mark_unanswered(record)
            raise
        if reply.drop:
            return False
        echoed = self._echo.of(headers) if self._echo and reply.status >= 300 else None
        no_body = request.method == b"HEAD"
        writer.write(
            _response(conn, decision, count, no_body=no_body, echo=self._echo, echoed=echoed)
        )
        if 200 <= reply.status < 300:
            self._record_deliveries(ids, times, received_ms)
        await writer.drain()
        return True

    def _record_request(self, record: ReceivedRequest) -> None:
        if self._keep_history:
            self._requests.append(record)
        self._request_count += 1
        for count, event in self._count_waiters:
            if self._request_count >= count:
                event.set()

    def _mark_unanswered(self, record: ReceivedRequest) -> None:
        """Record status 0 for a request whose delayed answer was cut off by going down."""
        for index in range(len(self._requests) - 1, -1, -1):
            if self._requests[index] is record:
                self._requests[index] = replace(record, status=0)
                return

    def _record_deliveries(
        self, ids: Sequence[str], times: Sequence[object], received_ms: int
    ) -> None:
        deliveries = [
            Delivery(event_id, received_ms, event_time)
            for event_id, event_time in zip(ids, times, strict=True)
        ]
        if not deliveries:
            return
        batch = {delivery.id for delivery in deliveries}
        if self._keep_history:
            self._deliveries.extend(deliveries)
            self._delivered |= batch
        for waiter in self._id_waiters:
            waiter.missing -= batch
            if not waiter.missing:
                waiter.done.set()
        if self._on_delivery is not None:
            self._on_delivery(deliveries)


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request, bytes] | None:
    """Read one whole request; None when the client closed the connection between requests."""
    request: h11.Request | None = None
    chunks: list[bytes] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(_READ_SIZE))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            chunks.append(event.data)
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request, b"".join(chunks)
        else:
            return None  # ConnectionClosed


def _response(
    conn: h11.Connection,
    decision: Decision,
    accepted: int,
    *,
    no_body: bool,
    echo: Echo | None = None,
    echoed: str | None = None,
) -> bytes:
    """Serialise the reply: {"accepted": N} for 2xx, {"error": reason} otherwise (see `Echo`)."""
    status = decision.reply.status
    content_type = "application/json"
    extra: list[tuple[str, str]] = []
    if 200 <= status < 300:
        content = orjson.dumps({"accepted": accepted})
    elif echo is not None and echoed is not None:
        if echo.raw_body:
            content, content_type = echoed.encode(), "text/plain; charset=utf-8"
        else:
            error = {"error": f"{status}: {decision.reason}", "echo": echoed}
            content = orjson.dumps(error).replace(b"/", b"\\/")
        extra.append(
            (
                "www-authenticate",
                f'Bearer error="invalid_token", error_description="{echoed}"',
            )
        )
        if 300 <= status < 400:
            extra.append(("location", f"/login?token={quote(echoed, safe='')}"))
    else:
        content = orjson.dumps({"error": f"{status}: {decision.reason}"})
    no_body = no_body or status in (204, 304)
    headers = [("content-type", content_type), *extra]
    if not no_body:
        headers.append(("content-length", str(len(content))))
    if decision.reply.retry_after is not None:
        headers.append(("retry-after", decision.reply.retry_after))
    out = conn.send(h11.Response(status_code=status, headers=headers))
    if not no_body:
        out += conn.send(h11.Data(data=content))
    return out + conn.send(h11.EndOfMessage())


def _decode_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Header names lower-cased (h11 already does); repeated headers joined with ', '."""
    headers: dict[str, str] = {}
    for name, value in raw:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _decode_body(body: bytes, content_encoding: str) -> bytes:
    """Gunzip a gzip body; an undecodable one is kept as sent (and parses to no events)."""
    if "gzip" not in content_encoding.lower():
        return body
    try:
        return gzip.decompress(body)
    except (OSError, EOFError, zlib.error):
        return body


class _Receipts:
    """Reads a JSON array body for its events' ids and times alone, skipping every other field
    (msgspec, in C): what the destination needs of each event unless it keeps them."""

    def __init__(self, id_field: str, event_time_field: str) -> None:
        self._decoder: msgspec.json.Decoder[list[Any]] | None = None
        if id_field != event_time_field:
            fields = [("id", object, msgspec.UNSET), ("time", object, None)]
            rename = {"id": id_field, "time": event_time_field}
            receipt = msgspec.defstruct("Receipt", fields, rename=rename)
            self._decoder = msgspec.json.Decoder(list[receipt])  # type: ignore[valid-type]

    def read(
        self, payload: bytes, content_type: str
    ) -> tuple[tuple[str, ...], list[object]] | None:
        """(ids, times) of a JSON array of objects that each have an id; None for any other
        body (NDJSON, not JSON, not an array of objects, an event without an id): parse it whole."""
        decoder = self._decoder
        if decoder is None or content_type.split(";", 1)[0].strip().lower() == _NDJSON:
            return None
        try:
            receipts = decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        ids = [receipt.id for receipt in receipts]
        if msgspec.UNSET in ids:
            return None
        return tuple(map(str, ids)), [receipt.time for receipt in receipts]


def _parse_events(payload: bytes, content_type: str) -> list[dict[str, object]]:
    """Events of a JSON array body, of an NDJSON body, or the one event of a JSON object body
    (a single-event request, `format = "single"`); [] if it does not parse."""
    try:
        if content_type.split(";", 1)[0].strip().lower() == _NDJSON:
            lines = payload.splitlines()
            parsed: object = [msgspec.json.decode(line) for line in lines if line.strip()]
        else:
            parsed = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return []
    if isinstance(parsed, dict):
        return [parsed]
    if not isinstance(parsed, list):
        return []
    return [event for event in parsed if isinstance(event, dict)]
