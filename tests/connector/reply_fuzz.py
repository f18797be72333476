"""The reply fuzzer of the connector's HTTP client: scripted destination bytes, one POST each.

A `Case` is what a destination writes once it has read a request (bytes in one or several
writes, or none), then a close, a reset or nothing. `ReplyRig` serves cases on loopback and
POSTs through `connector.sender`, counted as `connector.delivery` counts; a `Failure` is a
property broken: `escaped` (an exception the connector does not count), `delivered-not-2xx`
(by `final_status`, an oracle apart from the transport's parser), `slow` (past the request
timeout plus `MARGIN_S`), `body` (past `MAX_BODY_BYTES` kept or decoded), `retry-after`
(outside [0, MAX_RETRY_AFTER_S]); `memory` is `chaos.reply_fuzz`'s, on a case run alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import socket
import struct
import time
import traceback
import zlib
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Literal

import httpx
from hypothesis import strategies as st

from config.destination import Destination
from connector.http1.fields import MAX_RETRY_AFTER_S
from connector.reply_policy import classify
from connector.sender import Route, Sender, opened_sender
from hifi.errors import DestinationRejected, DestinationUnavailable

End = Literal["close", "reset", "hold"]
MARGIN_S = 1.0
MAX_BODY_BYTES = 1024 * 1024 + 64 * 1024  # the transport keeps 1 MiB; decoding adds nothing
MAX_HOLD_BYTES = 64 * 1024  # a case held open sends one write at most this long
_WRITE_GAP_S = 0.002  # between writes, so the client reads them apart
_BATCH = b'[{"id":"e-1","event_time":1700000000000,"seq":1}]'
_JSON = {"Content-Type": "application/json"}
_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True, slots=True, repr=False)
class Case:
    """The bytes a destination writes after reading the request, and how it ends."""

    writes: tuple[bytes, ...]
    end: End

    @property
    def data(self) -> bytes:
        return b"".join(self.writes)

    def __repr__(self) -> str:
        shown = repr(self.data) if len(self.data) <= 160 else f"{self.data[:160]!r}..."
        return f"{shown} ({len(self.data)} bytes in {len(self.writes)} writes, then {self.end})"


@dataclass(frozen=True, slots=True)
class Failure:
    """One property a case broke: which, where (the project's frame, for an exception), how."""

    prop: str
    where: str
    detail: str
    case: Case
    history: tuple[Case, ...] = ()  # cases served before it on the same connection

    @property
    def signature(self) -> tuple[str, str]:
        return self.prop, self.where

    def __str__(self) -> str:
        after = "".join(f"\n    after: {earlier}" for earlier in self.history)
        return f"[{self.prop} @ {self.where}] {self.detail}\n    case: {self.case}{after}"


@dataclass(slots=True)
class Outcome:
    """How the connector counted one case, and the properties it broke."""

    kind: str  # delivered, retried, rejected, escaped
    final_status: int | None
    failures: list[Failure] = field(default_factory=list)


# --- the oracle ------------------------------------------------------------------------------

_STATUS_LINE = re.compile(rb"[\r\n]*HTTP/[0-9]\.[0-9][ \t]+([0-9]{3})(?=[ \t\r\n]|\Z)")
_HEAD_END = re.compile(rb"\n\r?\n")


def final_status(data: bytes) -> int | None:
    """The status of the first reply that is not 1xx, as its status line reads; None if the
    bytes do not begin with status lines (interim replies skipped to their blank line)."""
    at = 0
    while (line := _STATUS_LINE.match(data, at)) is not None:
        status = int(line.group(1))
        if not 100 <= status < 200:
            return status
        end = _HEAD_END.search(data, line.start(1))
        if end is None:
            return None
        at = end.end()
    return None


# --- the rig ---------------------------------------------------------------------------------


class ReplyRig:
    """A loopback server answering each `POST /case/N` with case N, and the client under test."""

    def __init__(self, request_timeout_s: float = 0.5, max_in_flight: int = 16) -> None:
        self.request_timeout_s = request_timeout_s
        self.max_in_flight = max_in_flight
        self._numbers = itertools.count()
        self._cases: dict[int, Case] = {}
        self._history: dict[int, tuple[Case, ...]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._senders = contextlib.AsyncExitStack()
        self._sender: Sender | None = None
        self.url = ""

    async def __aenter__(self) -> ReplyRig:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/case"
        self._sender = await self._senders.enter_async_context(self.new_sender(self.max_in_flight))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        await self._senders.aclose()
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    def new_sender(self, max_in_flight: int) -> contextlib.AbstractAsyncContextManager[Sender]:
        """The connector's sender of a destination at this rig (`connector.sender`)."""
        dest = {"name": "fuzz", "url": self.url, "source_topics": ["fuzz"]}
        limits = {"request_timeout_s": self.request_timeout_s, "max_in_flight": max_in_flight}
        return opened_sender(Destination.model_validate({**dest, **limits}))

    async def run(self, case: Case, sender: Sender | None = None) -> Outcome:
        """POST once, answered by `case`; classify as the connector does and check it."""
        sender = sender or self._sender
        assert sender is not None
        number = next(self._numbers)
        self._cases[number] = case
        started_s = time.monotonic()
        try:
            outcome = await self._post(sender, f"{self.url}/{number}", case)
        finally:
            self._cases.pop(number, None)
            history = self._history.pop(number, ())
        elapsed_s = time.monotonic() - started_s
        if elapsed_s > self.request_timeout_s + MARGIN_S:
            outcome.failures.append(Failure("slow", outcome.kind, f"{elapsed_s:.2f}s", case))
        outcome.failures[:] = [replace(f, history=history) for f in outcome.failures]
        return outcome

    async def _post(self, sender: Sender, url: str, case: Case) -> Outcome:
        status = final_status(case.data)
        outcome = Outcome("escaped", status)
        try:
            async with asyncio.timeout(self.request_timeout_s):
                answer = await sender.post(Route.of(url, _JSON), _BATCH, ())
            kept = len(answer.body)
            if kept > MAX_BODY_BYTES:
                outcome.failures.append(
                    Failure("body", f"{answer.status // 100}xx", f"{kept} bytes kept", case)
                )
            classify(answer)
            outcome.kind = "delivered"
        except (httpx.TransportError, TimeoutError):
            outcome.kind = "retried"
        except DestinationUnavailable as exc:
            outcome.kind = "retried"
            wait_s = exc.retry_after_s
            if wait_s is not None and not 0 <= wait_s <= MAX_RETRY_AFTER_S:  # nan, inf included
                outcome.failures.append(Failure("retry-after", "classify", f"{wait_s!r} s", case))
        except (DestinationRejected, httpx.TooManyRedirects):
            outcome.kind = "rejected"
        except Exception as exc:
            outcome.failures.append(_escaped(exc, case))
        if outcome.kind == "delivered" and not (status is not None and 200 <= status < 300):
            outcome.failures.append(
                Failure("delivered-not-2xx", str(status), f"final status line reads {status}", case)
            )
        return outcome

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        served: list[Case] = []
        try:
            dropped = (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError)
            with contextlib.suppress(*dropped):  # by the client, or the rig closing
                while (case := await self._next_case(reader, served)) is not None:
                    await _play(case, writer)
                    if case.end != "hold":
                        return
        finally:
            self._handlers.discard(task)
            if not writer.is_closing():
                writer.close()

    async def _next_case(self, reader: asyncio.StreamReader, served: list[Case]) -> Case | None:
        """Read one request; its case, noting the cases served before it on this connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        number = int(head.split(b" ", 2)[1].rsplit(b"/", 1)[1])
        await reader.readexactly(len(_BATCH))  # httpx's Content-Length
        case = self._cases.get(number)
        if case is not None:
            self._history[number] = tuple(served[-3:])
            served.append(case)
        return case


async def _play(case: Case, writer: asyncio.StreamWriter) -> None:
    for index, chunk in enumerate(case.writes):
        if index:
            await asyncio.sleep(_WRITE_GAP_S)
        writer.write(chunk)
        await writer.drain()
    if case.end == "reset":
        sock = writer.get_extra_info("socket")
        if sock is not None:  # SO_LINGER 0: close sends RST
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    elif case.end == "close":
        writer.close()


def _escaped(exc: Exception, case: Case) -> Failure:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f.filename.startswith(_ROOT) and "/.venv/" not in f.filename]
    frame = (ours or frames)[-1] if frames else None
    where = f"{Path(frame.filename).name}:{frame.lineno}" if frame else "?"
    return Failure("escaped", f"{type(exc).__name__} at {where}", f"{exc!r}"[:300], case)


# --- the strategies --------------------------------------------------------------------------

_STATUSES = (200, 500, 503, 429, 400, 204, 201, 404, 301, 307, 100, 101, 103, 302, 304, 599, 299)
_INTERIM = (b"HTTP/1.1 100 Continue", b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload")
_REASONS = (b"OK", b"", b"Some Reason", b"\xc3\xa9chec", b"\x00\x7f\xff")
_HEADERS = (
    b"Content-Type: application/json",
    b"Content-Type: text/plain; charset=utf-8",
    b"Content-Type: text/html; charset=iso-8859-1",
    b"Content-Type: text/plain; charset=x-unknown",
    b"Content-Type: text/plain; charset=utf-16",
    b"Retry-After: 5",
    b"Retry-After: \xc2\xb2",  # '²': isdigit() is true
    b"Retry-After: \xd9\xa3",  # '٣'
    b"Retry-After: 99999999999999999999999999",
    b"Retry-After: Wed, 21 Oct 2015 07:28:00 GMT",
    b"Retry-After: Fri, 31 Dec 9999 23:59:59 GMT",
    b"Retry-After: Mon, 01 Jan 0001 00:00:00 GMT",
    b"Retry-After: Sun Nov  6 08:49:37 1994",
    b"Retry-After: -1",
    b"Location: /elsewhere",
    b"Location: http://198.51.100.1/\xff",
    b"Connection: close",
    b"Connection: keep-alive",
    b"Content-Encoding: gzip",
    b"Content-Encoding: br, zstd",
    b"Content-Encoding: identity",
    b"Content-Encoding: x-unknown",
    b"X-Empty:",
    b"X-Big: " + b"v" * 70_000,
)
_TOKENS = [bytes([c]) for c in b"\n \t:\x00\xff"] + (
    b"\r\n|\r\n\r\n|0\r\n\r\n|HTTP/1.1 200 OK\r\n|Content-Length: 5\r\n|Transfer-Encoding: chunked\r\n"
).split(b"|")
_FRAMINGS = ("length", "chunked", "none", "short", "long", "huge", "both", "twice", "bad-chunk")


def _gzip(data: bytes, wbits: int = 31, repeat: int = 1) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join(packer.compress(data) for _ in range(repeat)) + packer.flush()


@cache
def bodies() -> tuple[tuple[bytes, bytes | None], ...]:
    """Reply bodies and their Content-Encoding; the last four large (1.2 MiB, 128 MiB bombs)."""
    error = b'{"error":"event e-1 refused","detail":"' + b"x" * 200 + b'"}'
    bomb = _gzip(bytes(1 << 20), repeat=128)
    return (
        (b"", None),
        (b"ok", None),
        (error, None),
        (b"\xff\xfe\xfa\xc3", None),
        (_gzip(error), b"gzip"),
        (_gzip(error, 15), b"deflate"),
        (_gzip(error, -15), b"deflate"),
        (_gzip(_gzip(error)), b"gzip, gzip"),
        (_gzip(error)[:-9], b"gzip"),
        (b"not compressed", b"gzip"),
        (b"y" * 1_200_000, None),  # past the transport's 1 MiB
        (bomb, b"gzip"),
        (_gzip(bomb), b"gzip, gzip"),
        (_gzip(bytes(1 << 20), 15, 128), b"deflate"),
    )


def _framed(body: bytes, framing: str, eol: bytes) -> tuple[list[bytes], bytes]:
    """The framing headers and the body as framed."""
    size = len(body)
    chunked = b"".join(b"%x%s%s%s" % (len(c), eol, c, eol) for c in (body[:7], body[7:]) if c)
    chunked += b"0" + eol + eol
    return {
        "length": ([b"Content-Length: %d" % size], body),
        "chunked": ([b"Transfer-Encoding: chunked"], chunked),
        "none": ([], body),
        "short": ([b"Content-Length: %d" % (size + 10)], body),
        "long": ([b"Content-Length: %d" % max(0, size - 1)], body),
        "huge": ([b"Content-Length: 18446744073709551616"], body),
        "both": ([b"Content-Length: %d" % size, b"Transfer-Encoding: chunked"], chunked),
        "twice": ([b"Content-Length: %d" % size, b"Content-Length: %d" % (size + 1)], body),
        "bad-chunk": ([b"Transfer-Encoding: chunked"], b"fffffffffffffffff" + eol + body),
    }[framing]


@st.composite
def valid_replies(draw: st.DrawFn) -> bytes:
    """A reply as a server might write it: interim replies, any status, headers, a body
    (compressed, a bomb), framed one of several ways, lines ended by CRLF or LF, a folded line."""
    eol = draw(st.sampled_from((b"\r\n", b"\n")))
    status = draw(st.one_of(st.sampled_from(_STATUSES), st.integers(0, 999)))
    version = draw(st.sampled_from((b"HTTP/1.1", b"HTTP/1.0")))
    lines = [b"%s %03d %s" % (version, status, draw(st.sampled_from(_REASONS)))]
    lines += draw(st.lists(st.sampled_from(_HEADERS[:-1]), max_size=4))
    choice = draw(st.integers(0, 199))  # 2% large bodies, 0.5% headers over 64 KiB
    large = 37 <= choice < 41
    body, coding = bodies()[choice - 41] if large else draw(st.sampled_from(bodies()[:-4]))
    lines += [_HEADERS[-1]] if choice == 41 else []
    if coding is not None and draw(st.booleans()):
        lines.append(b"Content-Encoding: " + coding)
    if draw(st.integers(0, 3)) == 3:
        lines.append(b"X-Folded: a" + eol + b" \tb")  # obs-fold
    framing, framed = _framed(body, draw(st.sampled_from(_FRAMINGS)), eol)
    interim = draw(st.lists(st.sampled_from(_INTERIM), max_size=2))
    head = b"".join(line.replace(b"\r\n", eol) + eol + eol for line in interim)
    return head + eol.join(lines + framing) + eol + eol + framed


_MUTATION = st.tuples(
    st.sampled_from(("insert", "delete", "flip", "cut")),
    st.one_of(st.integers(0, 400), st.integers(0, 1 << 21)),  # mostly inside the head
    st.integers(1, 32),
    st.one_of(st.sampled_from(_TOKENS), st.binary(min_size=1, max_size=8)),
)


def _mutated(data: bytes, mutations: list[tuple[str, int, int, bytes]]) -> bytes:
    for kind, at, size, insert in mutations:
        at = min(at, len(data))
        if kind == "insert":
            data = data[:at] + insert + data[at:]
        elif kind == "delete":
            data = data[:at] + data[at + size :]
        elif kind == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ (size % 255 + 1)]) + data[at + 1 :]
        elif kind == "cut":
            data = data[:at]
    return data


def _case(data: bytes, splits: list[int], end: int) -> Case:
    cuts = sorted({min(s, len(data)) for s in splits} - {0, len(data)})
    writes = tuple(data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True))
    held = end == 9 and len(writes) == 1 and len(data) <= MAX_HOLD_BYTES
    return Case(writes or (b"",), "hold" if held else ("reset" if end >= 6 else "close"))


def replies() -> st.SearchStrategy[Case]:
    """Valid replies, mutated valid replies (bytes inserted, deleted, flipped, cut) and noise;
    written in up to four writes; then closed (60%), reset (30%) or held open (10%)."""
    data = st.one_of(
        valid_replies(),
        st.builds(_mutated, valid_replies(), st.lists(_MUTATION, min_size=1, max_size=4)),
        st.one_of(st.binary(max_size=300), st.binary(max_size=40).map(b"HTTP/1.1 ".__add__)),
    )
    splits = st.lists(st.one_of(st.integers(0, 64), st.integers(0, 1 << 17)), max_size=3)
    return st.builds(_case, data, splits, st.integers(0, 9))
