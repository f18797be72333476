"""A TCP proxy on loopback that can cut every connection and refuse new ones, to test network
faults, can hold every chunk for a while each way, to slow a broker down (`delay_ms`), and can
hold every byte until released, as a network that drops packets (`hold`: nothing refused,
nothing answered)."""

from __future__ import annotations

import asyncio
import contextlib

_CHUNK_BYTES = 64 * 1024
_HELD_CHUNKS = 256  # a delayed link holds at most this many chunks each way, then stops reading


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target_host`:`target_port` until told to cut the link."""

    def __init__(
        self, target_host: str, target_port: int, *, port: int = 0, delay_ms: float = 0.0
    ) -> None:
        self.target = (target_host, target_port)
        self.port = port
        # each chunk is written this long after it was read, in each direction (pipelined: the
        # link's throughput is kept, only its latency grows)
        self.delay_ms = delay_ms
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()  # cleared: every byte read waits (`hold`)
        self._flowing.set()
        self.connections = 0

    async def __aenter__(self) -> TcpProxy:
        await self.restore()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.cut()

    @property
    def is_cut(self) -> bool:
        return self._server is None

    async def restore(self) -> None:
        """Listen again (on the same port) and forward new connections."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def hold(self) -> None:
        """Forward nothing more, either way, on any connection (new ones too), until `release`:
        a peer sees its requests unanswered, as behind a firewall that drops its packets."""
        self._flowing.clear()

    def release(self) -> None:
        """Forward again what was held, and what comes next."""
        self._flowing.set()

    async def cut(self) -> None:
        """Stop listening and reset every open connection in both directions."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        for pipe in list(self._pipes):
            pipe.cancel()
        if self._pipes:
            await asyncio.gather(*self._pipes, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        for w in (writer, up_writer):
            self._writers.add(w)
        pipes = [
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            self._pipes.difference_update(pipes)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.delay_ms > 0:
            await self._delayed_pipe(reader, writer)
            return
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while chunk := await reader.read(_CHUNK_BYTES):
                await self._flowing.wait()
                writer.write(chunk)
                await writer.drain()

    async def _delayed_pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Read as it comes; write each chunk `delay_ms` after it was read, in order."""
        loop = asyncio.get_running_loop()
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(maxsize=_HELD_CHUNKS)

        async def release() -> None:
            while True:
                due, chunk = await held.get()
                if not chunk:
                    return
                await asyncio.sleep(max(0.0, due - loop.time()))
                writer.write(chunk)
                await writer.drain()

        releasing = asyncio.create_task(release())
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while chunk := await reader.read(_CHUNK_BYTES):
                    await held.put((loop.time() + self.delay_ms / 1000, chunk))
            await held.put((loop.time() + self.delay_ms / 1000, b""))
            with contextlib.suppress(ConnectionError):
                await releasing
        finally:
            releasing.cancel()
            await asyncio.gather(releasing, return_exceptions=True)
