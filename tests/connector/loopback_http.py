"""Small scripted HTTP servers on loopback for the transport's tests: what a real destination's
server may do on the wire (chunks, close-delimited bodies, closing idle connections, garbage)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "RawServer"], Awaitable[None]]


@dataclass
class RawServer:
    """A loopback server running `handler` for each connection; counts what the client did.

    Handlers still running at exit are cancelled (and end quietly)."""

    handler: Handler
    ssl_context: ssl.SSLContext | None = None
    opened: int = 0  # connections accepted
    open_now: int = 0
    max_open: int = 0  # the most open at once
    eofs: int = 0  # connections the client closed (read_request saw the end)
    heads: list[bytes] = field(default_factory=list)  # every request head read, in order
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        scheme = "http" if self.ssl_context is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}/v1/events"

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One request's body (its head kept in `heads`); None when the client closed."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.eofs += 1
            return None
        self.heads.append(head)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return await reader.readexactly(length)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.opened += 1
        self.open_now += 1
        self.max_open = max(self.max_open, self.open_now)
        # the test ended, or the client dropped the connection: both expected here
        expected = (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError)
        try:
            with contextlib.suppress(*expected):
                await self.handler(reader, writer, self)
        finally:
            self.open_now -= 1
            self._tasks.discard(task)
            writer.transport.abort()


def answer(replies: list[bytes], *, then: Callable[[], Awaitable[None]] | None = None) -> Handler:
    """A handler that answers the server's requests with `replies` in turn, whichever
    connection they came on (the last one repeated); with `then`, awaits it after the first
    reply of a connection and closes it."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        while await server.read_request(reader) is not None:
            writer.write(replies[min(len(server.heads), len(replies)) - 1])
            await writer.drain()
            if then is not None:
                await then()
                return

    return handle


def reply_then_close(reply: bytes) -> Handler:
    """A handler that answers one request with `reply` (sent as is, whole or cut short) and
    closes the connection cleanly (a FIN, not a reset)."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        await server.read_request(reader)
        writer.write(reply)
        await writer.drain()
        writer.close()

    return handle


async def until_eof(reader: asyncio.StreamReader) -> None:
    """Read and drop everything until the client closes."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
