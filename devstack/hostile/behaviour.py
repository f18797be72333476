"""The hostile destination's vocabulary: the outcome each behaviour demands of the connector, the
registry of behaviours, and one exchange (a request read, the raw socket that answers it)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

import msgspec

from hifi.vocabulary import Reason

HOLD_MAX_S = 30.0  # the longest a stalling behaviour holds a connection (manual trials end too)
TRICKLE_S = 0.2  # between two trickled bytes


class Expect(StrEnum):
    """What the connector must make of a behaviour's reply."""

    #: the status line read 2xx: each event delivered exactly once, never sent again
    DELIVERED = "delivered"
    #: retried locally (a new request each attempt), then handed to the retrier (NAME.retry_in)
    RETRIED = "retried"
    #: handed to the retrier with the cause `redirect` (`hifi-cause`); never dead-lettered
    MOVED = "moved"
    #: written to NAME.dlq with the behaviour's `reason` (`hifi-reason`)
    DEAD_LETTERED = "dead_lettered"


@dataclass(slots=True)
class Seen:
    """One request as the destination read it."""

    method: str
    path: str
    port_kind: str  # the listener: main, other, trusted or tls
    headers: dict[str, str]  # lower-cased names, latin-1 values
    ids: list[str]
    landed: bool  # the request came by a redirect and reached its landing path


@dataclass(slots=True)
class Record:
    """What one behaviour (under one tag) saw and answered."""

    requests: list[Seen] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)  # ids of every request answered 2xx
    held_s: list[float] = field(default_factory=list)  # how long each stalled reply was held


@dataclass(slots=True)
class Request:
    """A request's head, and its body once read."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes | None = None

    def header(self, name: str) -> str | None:
        found = [value for key, value in self.headers if key == name]
        return found[-1] if found else None


class Exchange:
    """One request and the raw connection that answers it: any bytes may go out."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: Request,
        record: Record,
        *,
        step: str,
        origins: dict[str, str],
        bomb: Callable[[], bytes],
    ) -> None:
        self.reader, self.writer, self.request, self.record = reader, writer, request, record
        self.step = step  # "" on the first request, "hop1", "hop2", ... on a redirect chain
        self.origins = origins  # listener kind -> http://127.0.0.1:PORT
        self.bomb = bomb  # the gzip bomb's bytes
        self.keep_alive = False  # set by a clean reply: the connection may carry another request
        self.was_reset = False
        self._read_at = time.monotonic()

    @property
    def base(self) -> str:
        """The request's path up to its step: /b/NAME/TAG."""
        parts = self.request.path.split("?")[0].split("/")
        return "/".join(parts[:4])

    async def body(self) -> bytes:
        """The request's body (Content-Length or chunked), read once."""
        if self.request.body is None:
            self.request.body = await _read_body(self.reader, self.request)
            self._read_at = time.monotonic()
        return self.request.body

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def reply(
        self,
        status: int,
        reason: str = "",
        headers: Iterable[tuple[str, str | bytes]] = (),
        body: bytes = b"",
        *,
        keep: bool = True,
    ) -> None:
        """A well-formed reply with a Content-Length; the ids count as delivered on a 2xx."""
        await self.body()
        lines = [f"HTTP/1.1 {status} {reason}".rstrip().encode() + b"\r\n"]
        lines += [head(name, value) for name, value in headers]
        lines.append(f"Content-Length: {len(body)}\r\n\r\n".encode())
        await self.send(b"".join(lines) + body)
        if 200 <= status < 300:
            self.delivered()
        self.keep_alive = keep

    def delivered(self) -> None:
        """Record the request's ids as answered 2xx (its body must have been read)."""
        self.record.delivered.extend(ids_of(self.request.body or b""))

    async def reset(self) -> None:
        """Close with a TCP RST (SO_LINGER 0) instead of a FIN."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.was_reset = True
        self.writer.transport.abort()

    async def hold_silent(self) -> None:
        """Say nothing until the client gives up (EOF), recording how long it waited."""
        try:
            async with asyncio.timeout(HOLD_MAX_S):
                while await self.reader.read(65536):
                    pass
        except (TimeoutError, ConnectionError):
            pass
        self._held()

    async def hold_writing(self, chunk: bytes, interval_s: float = 0.0) -> None:
        """Write `chunk` again and again until the client gives up, recording how long it took."""
        try:
            async with asyncio.timeout(HOLD_MAX_S):
                while not self.writer.is_closing():
                    await self.send(chunk)
                    await asyncio.sleep(interval_s)
        except (TimeoutError, ConnectionError, OSError):
            pass
        self._held()

    def _held(self) -> None:
        self.record.held_s.append(time.monotonic() - self._read_at)


def head(name: str, value: str | bytes) -> bytes:
    """One header line, the value sent as given (bytes) or UTF-8."""
    raw = value if isinstance(value, bytes) else value.encode()
    return name.encode() + b": " + raw + b"\r\n"


def ids_of(body: bytes) -> list[str]:
    """The `id` of every event of a JSON array body (none when it is not one)."""
    try:
        events = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return []
    if not isinstance(events, list):
        return []
    return [str(e["id"]) for e in events if isinstance(e, dict) and "id" in e]


async def _read_body(reader: asyncio.StreamReader, request: Request) -> bytes:
    if (request.header("transfer-encoding") or "").lower() == "chunked":
        chunks = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")
        return b"".join(chunks)
    return await reader.readexactly(int(request.header("content-length") or 0))


Answer = Callable[[Exchange], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Behaviour:
    """A named way to answer, and what the connector must make of it."""

    name: str
    doc: str
    expect: Expect
    answer: Answer
    reason: Reason | None = None  # a dead letter's `hifi-reason`
    unfollowed: Expect | None = None  # the outcome when follow_redirects = false, if another
    secrets_at_landing: bool | None = None  # a redirect's landing: must carry secrets or not
    stalls: bool = False  # holds the connection: the held time must stay under the timeout
    listener: str = "main"  # where the connector must send it: main, or the tls listener


BEHAVIOURS: dict[str, Behaviour] = {}


def behaviour(
    expect: Expect,
    *,
    reason: Reason | None = None,
    unfollowed: Expect | None = None,
    secrets_at_landing: bool | None = None,
    stalls: bool = False,
    listener: str = "main",
) -> Callable[[Answer], Answer]:
    """Register a function as the behaviour of its name; its docstring's line is the description."""

    def register(answer: Answer) -> Answer:
        name = answer.__name__
        doc = (answer.__doc__ or name).strip().splitlines()[0]
        BEHAVIOURS[name] = Behaviour(
            name,
            doc,
            expect,
            answer,
            reason,
            unfollowed,
            secrets_at_landing,
            stalls,
            listener,
        )
        return answer

    return register
