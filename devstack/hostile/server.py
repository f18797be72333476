"""A hostile HTTP/1.1 destination on raw asyncio sockets: each request path names a behaviour
(broken bytes, stalls, resets, redirects, bombs) that the connector must survive.

`POST /b/NAME/TAG` is answered the way behaviour NAME says (`BEHAVIOURS`, registered by the
behaviour modules of this package, each with the outcome the connector must reach); TAG only keeps
apart the records of several runs (a tenant, a client). A redirect's hops go to
`/b/NAME/TAG/hopN`, its landing to `/b/NAME/TAG/landed`, answered 200 by the server itself.

Four listeners: `main`, `other` (an origin no redirect may carry secrets to), `trusted` (one a
catalog may trust) and `tls` (`devstack.hostile.tls`: TLS that requires a client certificate,
from a throw-away CA, `ca_pem`; it counts refusals and answers 200 only past a certificate).
Per NAME/TAG the server records every request (method, headers, listener, ids), the ids of every
request answered 2xx and how long each stalled reply was held.

    python -m devstack.hostile --port 8080      # then POST to http://127.0.0.1:8080/b/NAME/x
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import zlib
from types import TracebackType

from devstack.hostile import delivered, failed, redirects
from devstack.hostile.behaviour import (
    BEHAVIOURS,
    Behaviour,
    Exchange,
    Record,
    Request,
    Seen,
    ids_of,
)
from devstack.hostile.tls import ClientCertListener

__all__ = ["BEHAVIOURS", "Behaviour", "HostileServer", "Record", "gzip_zeros"]

_MODULES = (delivered, failed, redirects)  # they register BEHAVIOURS
_HOST = "127.0.0.1"
_HEAD_LIMIT = 64 * 1024
_LISTENERS = ("main", "other", "trusted")  # and tls, on a thread of its own
GIB = 1 << 30


@functools.cache
def gzip_zeros(size: int) -> bytes:
    """A gzip stream of `size` zero bytes (about size / 1000 bytes long)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [packer.compress(block) for _ in range(size >> 20)]
    parts.append(packer.compress(bytes(size & ((1 << 20) - 1))))
    parts.append(packer.flush())
    return b"".join(parts)


class HostileServer:
    """The hostile destination, an async context manager; `port=0` picks free ports."""

    def __init__(self, *, port: int = 0, bomb_bytes: int = GIB) -> None:
        self.records: dict[str, Record] = {}
        self.origins: dict[str, str] = {}
        self._port = port
        self._bomb_bytes = bomb_bytes
        self._servers: list[asyncio.Server] = []
        self._tasks: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.tls = ClientCertListener()

    @property
    def ca_pem(self) -> bytes:
        """The CA that signed the tls listener's certificate (trust it to reach the listener)."""
        return self.tls.ca_pem

    def url(self, name: str, tag: str = "x") -> str:
        """Where to POST to meet behaviour `name`, on the listener it is meant for."""
        listener = BEHAVIOURS[name].listener
        scheme = "https" if listener == "tls" else "http"
        return f"{scheme}://{self.origins[listener].split('://')[1]}/b/{name}/{tag}"

    def record(self, name: str, tag: str = "x") -> Record:
        return self.records.setdefault(f"{name}/{tag}", Record())

    def bomb(self) -> bytes:
        return gzip_zeros(self._bomb_bytes)

    async def __aenter__(self) -> HostileServer:
        await asyncio.to_thread(self.bomb)  # made once, before any request waits for it
        for kind in _LISTENERS:
            port = self._port if kind == "main" else 0
            server = await asyncio.start_server(
                functools.partial(self._connection, kind), _HOST, port, limit=_HEAD_LIMIT
            )
            self.origins[kind] = f"http://{_HOST}:{server.sockets[0].getsockname()[1]}"
            self._servers.append(server)
        self.tls.start()
        self.origins["tls"] = f"https://{_HOST}:{self.tls.port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.tls.stop)
        for server in self._servers:
            server.close()
        for writer in self._tasks.values():
            writer.transport.abort()  # every held reply ends as if the client gave up
        if self._tasks:
            _, late = await asyncio.wait(list(self._tasks), timeout=2.0)
            for task in late:
                task.cancel()
        for server in self._servers:
            await server.wait_closed()

    async def _connection(
        self, kind: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks[task] = writer
        reset = False
        try:
            while True:
                request = await _read_head(reader)
                if request is None:
                    break
                x = await self._answer(kind, reader, writer, request)
                reset = x.was_reset
                if not x.keep_alive:
                    break
                await x.body()
        except (ConnectionError, OSError, ValueError, asyncio.IncompleteReadError):
            pass
        except asyncio.LimitOverrunError:
            pass
        finally:
            if task is not None:
                self._tasks.pop(task, None)
            if not reset:
                writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.wait_closed()

    async def _answer(
        self,
        kind: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: Request,
    ) -> Exchange:
        parts = request.path.split("?")[0].split("/")
        name = parts[2] if len(parts) > 2 and parts[1] == "b" else ""
        tag = parts[3] if len(parts) > 3 else "x"
        step = parts[4] if len(parts) > 4 else ""
        record = self.record(name, tag)
        x = Exchange(
            reader, writer, request, record, step=step, origins=self.origins, bomb=self.bomb
        )
        behaviour = BEHAVIOURS.get(name)
        if behaviour is None:
            await x.reply(404, "Not Found", body=b"no such behaviour: GET /b/ to list them")
            return x
        seen = Seen(request.method, request.path, kind, dict(request.headers), [], step == "landed")
        record.requests.append(seen)
        if step == "landed":
            await x.reply(200, "OK", body=b'{"landed":true}')
        else:
            await behaviour.answer(x)
        seen.ids = ids_of(request.body or b"")
        return x


async def _read_head(reader: asyncio.StreamReader) -> Request | None:
    """The next request's line and headers; None at a clean end of the connection."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    line, *fields = raw.decode("latin-1").split("\r\n")
    method, path, _version = line.split(" ", 2)
    headers = []
    for text in fields:
        if ":" in text:
            name, value = text.split(":", 1)
            headers.append((name.strip().lower(), value.strip()))
    return Request(method, path, headers)


def describe() -> list[str]:
    """One line per behaviour: its name, the outcome it demands and what it does."""
    lines = []
    for behaviour in BEHAVIOURS.values():
        outcome = behaviour.expect.value
        if behaviour.reason is not None:
            outcome += f" ({behaviour.reason.value})"
        if behaviour.unfollowed is not None:
            outcome += f", {behaviour.unfollowed.value} if not followed"
        lines.append(f"{behaviour.name:26} {outcome:40} {behaviour.doc}")
    return lines


async def _serve(port: int, bomb_bytes: int) -> None:
    async with HostileServer(port=port, bomb_bytes=bomb_bytes) as server:
        print("\n".join(describe()))
        print(" ".join(f"{kind}={origin}" for kind, origin in server.origins.items()))
        print(f"POST a JSON array of events to {server.origins['main']}/b/NAME/TAG")
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.hostile", description=__doc__)
    parser.add_argument("--port", type=int, default=8080, help="the main listener's port")
    parser.add_argument("--bomb-mib", type=int, default=1024, help="a gzip bomb's inflated MiB")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.bomb_mib << 20))
