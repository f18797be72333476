"""One HTTP/1.1 connection: an asyncio protocol that writes a request and parses its response.

The response is parsed by httptools (llhttp) as it arrives, in the event loop's callbacks, and
handed to the awaiting request whole: no task, no stream object, no lock per exchange. One
exchange at a time; the pool (`connector.http1.pool`) decides who has the connection.

Lenient where RFC 9112 says a client must be: obs-fold header lines and bare-LF line ends are
read. A reply whose status line reads 2xx is the destination's yes whatever follows it (headers
over the cap, ambiguous framing, a body cut, reset or trickled past the read timeout): it is
returned as the reply, its body as far as it came, and the connection is closed.
"""

from __future__ import annotations

import asyncio
import select
from typing import Any, cast

import httptools
import httpx

from connector.http1.reply import Reply, is_2xx_status_line, lenient_parser

__all__ = ["Http1Connection", "Origin", "PoolKey", "Reply"]

Origin = tuple[str, str, int]  # (scheme, host, port): where a request goes
PoolKey = tuple[str, str, int, str]
"""(scheme, host, port, how): the connections that can serve a request; `how` tells apart the
connections opened another way to the same origin (without the client certificate, with the
addresses checked, through a proxy)."""

_NO_BODY_STATUSES = frozenset({204, 304})
_FRAMING_HEADERS = frozenset({b"content-length", b"transfer-encoding"})
_ONE_WRITE_BYTES = 256 * 1024
HEADER_BYTES_MAX = 64 * 1024  # a reply's header names and values, in all
_FIRST_LINE_BYTES = 256


class Http1Connection(asyncio.Protocol):
    """A keep-alive connection to one origin; `exchange` sends one request and reads its reply.

    It is never reused once `closed` is set: the peer closed it (EOF, reset), it sent bytes
    nobody asked for, a response broke the parser, or a body was cut at `max_body_bytes`.
    """

    def __init__(self, key: PoolKey, max_body_bytes: int) -> None:
        self.key = key
        self.closed = False
        #: reply bytes received during the current (or last) exchange
        self.received_bytes = 0
        self._readable: select.poll | None = None  # polls the socket: `peer_spoke`
        self.idle_since_s = 0.0  # monotonic time it was last put back idle (the pool's)
        self._loop = asyncio.get_running_loop()
        self._max_body_bytes = max_body_bytes
        self._transport: asyncio.Transport | None = None
        self._parser = lenient_parser(self)
        self._stale_parser = False  # after a HEAD reply: the parser still expects its body
        self._reply: asyncio.Future[Reply] | None = None
        self._head_only = False
        self._interim = False  # a 1xx reply is being parsed: skipped
        self._headers_done = False
        self._reason = b""
        self._status_line = False  # the final reply's status line was read whole
        self._first_chunks: list[bytes] = []  # the exchange's first bytes (256 at least)
        self._first_bytes = 0
        self._interim_seen = False  # a 1xx came first: the first bytes are not the final's
        self._anomalies: list[str] = []
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._chunks: list[bytes] = []
        self._kept_bytes = 0
        self._cut = False
        self._last_read_s = 0.0
        # one timer per connection, not per request: it re-arms itself while a reply is read
        self._read_timer: asyncio.TimerHandle | None = None
        self._read_timeout_s: float | None = None  # the exchange being read, if it has one
        self._deadline_s: float | None = None  # loop time by which its reply must be whole
        self._drained: asyncio.Future[None] | None = None  # set while writing is paused
        self._lost: asyncio.Future[None] | None = None  # made by `wait_lost`
        self._gone = False  # connection_lost was called

    @property
    def usable(self) -> bool:
        """Whether a request may be written to it now (open, and not closing)."""
        transport = self._transport
        return not self.closed and transport is not None and not transport.is_closing()

    def peer_spoke(self) -> bool:
        """Whether an idle connection has something unread: the peer closed it (an end of
        stream the loop has not yet seen) or sent bytes nobody asked for. Either way it must
        not carry a request: httpcore asks the same of a pooled connection before reuse."""
        if self._readable is None:
            return False
        try:
            return bool(self._readable.poll(0))
        except OSError:
            return True

    async def exchange(
        self,
        head: bytes,
        body: bytes,
        *,
        head_only: bool,
        write_timeout_s: float | None,
        read_timeout_s: float | None,
        deadline_s: float | None = None,
    ) -> Reply:
        """Write a request and return its response. The head (request line and headers) is
        one write, with the body when it is small (a large one is not copied onto it).
        `read_timeout_s` bounds each wait for reply bytes, `deadline_s` (loop time) the whole
        reply: a destination that trickles one byte a second is not waited on for ever.

        Raises httpx's `WriteTimeout`, `ReadTimeout`, `RemoteProtocolError` or `ReadError`;
        after any exception the connection must be closed (`abort`)."""
        assert self._transport is not None
        reply: asyncio.Future[Reply] = self._loop.create_future()
        self._start(reply, head_only)
        try:
            if len(body) <= _ONE_WRITE_BYTES:
                self._transport.write(head + body)
            else:
                self._transport.write(head)
                self._transport.write(body)
            if self._drained is not None:  # the write buffer is above its high-water mark
                await self._drain(reply, write_timeout_s)
            if (read_timeout_s is not None or deadline_s is not None) and not reply.done():
                self._last_read_s = now_s = self._loop.time()
                self._read_timeout_s, self._deadline_s = read_timeout_s, deadline_s
                self._arm_read_timer(self._due_s(now_s))
            result = await reply
            if result.reusable and self._transport.get_write_buffer_size():
                self.closed = True  # answered before it took the whole request: out of step
                result.reusable = False
            return result
        finally:
            self._reply = None
            self._read_timeout_s = self._deadline_s = None  # a timer still set ends itself

    def close(self) -> None:
        """Close after what is written is flushed (a clean end: expired, or told to close)."""
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection at once: its state is unknown (an error, a timeout, cancelled)."""
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    async def wait_lost(self) -> None:
        """Return once the connection is gone (after `close` or `abort`)."""
        if self._gone:
            return
        if self._lost is None:
            self._lost = self._loop.create_future()
        await self._lost

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport: uvloop's are not subclasses of asyncio.Transport, so no isinstance
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # poll, not select: no limit on the descriptor's number
            self._readable = select.poll()
            self._readable.register(sock.fileno(), select.POLLIN)

    def data_received(self, data: bytes) -> None:
        reply = self._reply
        if reply is None or reply.done():
            self.abort()  # bytes nobody asked for: the stream is out of step
            return
        self._last_read_s = self._loop.time()
        self.received_bytes += len(data)
        if self._first_bytes < _FIRST_LINE_BYTES:  # kept, not copied: read only on a failure
            self._first_chunks.append(data)
            self._first_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("the server switched protocols; not supported"))
        except httptools.HttpParserError as exc:
            why, kind = f"malformed HTTP response: {exc}", "framing"
            if self._header_bytes > HEADER_BYTES_MAX:
                why, kind = (
                    f"HTTP response headers over {HEADER_BYTES_MAX} bytes",
                    "headers_too_large",
                )
            self._anomalies.append(kind)
            error = httpx.RemoteProtocolError(why)
            error.__cause__ = exc
            self._fail(error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self._gone = True
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        reply = self._reply
        if reply is None or reply.done():
            return
        if self._headers_done and self._ends_at_close():
            self._finish(reusable=False)  # a body delimited by the end of the connection
            return
        if self._said_yes():
            self._anomalies.append("cut_after_2xx")
            self._finish(reusable=False)
            return
        if exc is None:
            self._fail(httpx.RemoteProtocolError("server disconnected before a complete response"))
            return
        error = httpx.ReadError(f"connection lost before a complete response: {exc}")
        error.__cause__ = exc
        self._fail(error)

    def eof_received(self) -> bool | None:
        """The server closed its side: nothing more is written here (over TLS the transport
        would otherwise still look open until the connection is lost)."""
        self.closed = True
        return None  # the transport closes itself

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # --- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._reply is None or self._reply.done():
            self.closed = True  # a message after the reply was whole: the stream is out of step

    def on_status(self, reason: bytes) -> None:
        self._reason += reason  # a data callback: called again for each piece fed

    def on_header(self, name: bytes, value: bytes) -> None:
        self._status_line = True
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > HEADER_BYTES_MAX:
            raise httptools.HttpParserError  # stops the parser; `data_received` says why
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if 100 <= self._parser.get_status_code() < 200:
            self._interim = True  # 100 Continue, 103 Early Hints: the real reply follows
            self._headers = []
            self._header_bytes = 0
            self._reason = b""
            return
        self._status_line = self._headers_done = True
        if self._head_only:  # no body follows, whatever Content-Length says
            self._stale_parser = True
            self._finish(reusable=self._parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self._cut or self._head_only:
            return
        room = self._max_body_bytes - self._kept_bytes
        if len(body) > room:  # read for an error message only: keep the start, drop the rest
            self._chunks.append(body[:room])
            self._kept_bytes += room
            self._cut = True
            self.closed = True
            self._finish(reusable=False)
            return
        self._chunks.append(body)
        self._kept_bytes += len(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            self._status_line = False  # the final reply's is to come
            self._interim_seen = True
            return
        if self._cut or self._head_only:
            return
        self._finish(reusable=self._parser.should_keep_alive())

    # --- internals ----------------------------------------------------------------------------

    def _start(self, reply: asyncio.Future[Reply], head_only: bool) -> None:
        if self._stale_parser:
            self._parser = lenient_parser(self)
            self._stale_parser = False
        self._reply = reply
        self._head_only = head_only
        self._interim = self._headers_done = self._cut = False
        self._status_line = self._interim_seen = False
        self._first_chunks = []
        self._first_bytes = 0
        self.received_bytes = 0
        self._anomalies = []
        self._reason = b""
        self._headers = []
        self._header_bytes = 0
        self._chunks = []
        self._kept_bytes = 0

    def _finish(self, *, reusable: bool) -> None:
        reply = self._reply
        if reply is None or reply.done():
            self.closed = True  # a second message on one request: out of step
            return
        body = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        version = b"HTTP/1.0" if self._parser.get_http_version() == "1.0" else b"HTTP/1.1"
        status = self._parser.get_status_code()
        reusable = reusable and not self.closed
        reply.set_result(
            Reply(status, self._reason, self._headers, body, version, reusable, self._anomalies)
        )

    def _fail(self, error: httpx.TransportError) -> None:
        """End the exchange with `error`, unless the reply's status line said 2xx: then the
        reply as far as it came (the destination accepted the request)."""
        self.closed = True
        reply = self._reply
        if reply is not None and not reply.done():
            if self._said_yes():
                if isinstance(error, httpx.ReadTimeout):
                    self._anomalies.append("slow_after_2xx")
                self._finish(reusable=False)
            else:
                reply.set_exception(error)
        if self._transport is not None:
            self._transport.abort()

    def _said_yes(self) -> bool:
        """Whether the final reply's status line was read whole and reads 2xx."""
        if self._interim or (self._head_only and self._headers_done):
            return False
        status = self._parser.get_status_code()
        if not 200 <= status < 300:
            return False
        if self._status_line:  # the parser read it whole: a reason, a header or the head's end
            return True
        # an error right after it ("HTTP/1.1 200" + CRLF, then a bad first header): read it here
        first = b"".join(self._first_chunks)[:_FIRST_LINE_BYTES]
        return not self._interim_seen and is_2xx_status_line(first)

    def _ends_at_close(self) -> bool:
        """Whether the response being read has its body delimited by the end of the connection."""
        if self._head_only or self._parser.get_status_code() in _NO_BODY_STATUSES:
            return False
        return not any(name.lower() in _FRAMING_HEADERS for name, _ in self._headers)

    async def _drain(self, reply: asyncio.Future[Reply], timeout_s: float | None) -> None:
        """Wait until the transport took the request, or the reply (or a failure) came first."""
        assert self._drained is not None
        either: list[asyncio.Future[Any]] = [self._drained, reply]
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError as exc:
            raise httpx.WriteTimeout(f"request not written within {timeout_s}s") from exc

    def _arm_read_timer(self, due_s: float) -> None:
        """Have the read timer fire by `due_s`: a timer set for later (or none) is set anew."""
        timer = self._read_timer
        if timer is not None and timer.when() <= due_s:
            return  # it fires first and re-arms itself for what is due then
        if timer is not None:
            timer.cancel()
        self._read_timer = self._loop.call_at(due_s, self._check_read)

    def _due_s(self, now_s: float) -> float:
        """When the reply being read times out: its read timeout after the last bytes came,
        or its deadline, whichever is first."""
        timeout_s, deadline_s = self._read_timeout_s, self._deadline_s
        due_s = now_s + 86_400.0 if timeout_s is None else self._last_read_s + timeout_s
        return due_s if deadline_s is None else min(due_s, deadline_s)

    def _check_read(self) -> None:
        """The read timer: fail the reply when nothing arrived for its read timeout, or it is
        not whole by its deadline, else re-arm for when that is due; with no reply being read
        (the exchange ended), stop."""
        self._read_timer = None
        reply, bounds = self._reply, (self._read_timeout_s, self._deadline_s)
        if reply is None or reply.done() or bounds == (None, None):
            return
        now_s = self._loop.time()
        due_s = self._due_s(now_s)
        if now_s >= due_s:
            if self._deadline_s is not None and now_s >= self._deadline_s:
                error = httpx.ReadTimeout("reply not whole by the request's deadline")
            else:
                error = httpx.ReadTimeout(f"no response data for {self._read_timeout_s}s")
            self._fail(error)
            return
        self._read_timer = self._loop.call_at(due_s, self._check_read)
