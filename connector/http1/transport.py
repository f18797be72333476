"""httpx's transport over asyncio connections: HTTP/1.1, keep-alive, TLS, httpx's timeouts.

httpx's client (timeouts, redirects, auth, exceptions, respx in tests) over a lean exchange:
the request's head and body in one write, the response parsed by httptools in the protocol's
callbacks. Failures are httpx's exceptions: `ConnectError` (refused, DNS, TLS handshake; the
`OSError` or `ssl.SSLError` as its `__cause__`) or `ConnectTimeout` when no request left,
`WriteTimeout`, `ReadTimeout`, `RemoteProtocolError` or `ReadError` once one did,
`PoolTimeout` when no connection was free in time.

A request is never sent twice: the caller counts and retries failed attempts. Only a pooled
connection found closing before anything was written to it is passed over for another.
"""

from __future__ import annotations

import asyncio
import ssl
from functools import partial

import httpx

from connector.http1.connection import Http1Connection, Origin, Reply
from connector.http1.pool import ConnectionPool

__all__ = ["MAX_BODY_BYTES", "Http1Transport"]

#: response bytes kept: a destination's body is only read for an error message
MAX_BODY_BYTES = 1024 * 1024
_HAPPY_EYEBALLS_DELAY_S = 0.25  # as aiohttp and httpcore race a host's addresses
_DEFAULT_PORTS = {"http": 80, "https": 443}
_METHODS = {name: name.encode("ascii") for name in ("POST", "GET", "HEAD", "PUT")}
_DEFAULT_LIMITS = httpx.Limits()


class Http1Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 to any origin, over a keep-alive pool bounded by `limits`.

    `ssl_context`: the TLS settings of https origins (trust, client certificate); None: httpx's
    default context (certifi's roots, host names verified), made on the first https request.
    Host names are checked against the URL's host, or the `sni_hostname` request extension.
    Response bodies are kept up to `max_body_bytes`; a longer one is cut there and its
    connection closed.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: httpx.Limits = _DEFAULT_LIMITS,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self._ssl_context = ssl_context
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["http/1.1"])
        self._pool = ConnectionPool(limits)
        self._max_body_bytes = max_body_bytes

    @property
    def open_connections(self) -> int:
        """Connections open, being opened or in use now (at most `max_connections`)."""
        return self._pool.open_count

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            reply = await self._exchange(request)
        except httpx.TransportError as exc:
            exc.request = request
            raise
        extensions = {"http_version": reply.http_version}
        if reply.reason:  # else httpx gives the status's standard phrase
            extensions["reason_phrase"] = reply.reason
        response = httpx.Response(
            reply.status,
            headers=reply.headers,
            stream=httpx.ByteStream(reply.body),
            extensions=extensions,
        )
        try:
            response.read()  # the body is here already: httpx's client then skips its read
        except httpx.DecodingError:  # a body its Content-Encoding does not decode: kept as sent
            response = httpx.Response(
                reply.status,
                headers=[(n, v) for n, v in reply.headers if n.lower() != b"content-encoding"],
                content=reply.body,
                extensions=extensions,
            )
        return response

    async def aclose(self) -> None:
        """Close every connection; the transport serves no request afterwards."""
        await self._pool.aclose()

    async def _exchange(self, request: httpx.Request) -> Reply:
        timeouts = request.extensions.get("timeout") or {}
        origin = _origin_of(request.url)
        head, body = _head_of(request), await _body_of(request)
        pool = self._pool
        while True:
            connection = await pool.acquire(origin, timeouts.get("pool"))
            if connection is None:
                connection = await self._open(origin, request, timeouts.get("connect"))
            elif not connection.usable:  # closed since it was put back: nothing was written
                pool.discard(connection)
                continue
            try:
                reply = await connection.exchange(
                    head,
                    body,
                    head_only=request.method == "HEAD",
                    write_timeout_s=timeouts.get("write"),
                    read_timeout_s=timeouts.get("read"),
                )
            except BaseException:
                pool.discard(connection)
                raise
            pool.release(connection, reusable=reply.reusable)
            return reply

    async def _open(
        self, origin: Origin, request: httpx.Request, timeout_s: float | None
    ) -> Http1Connection:
        """A new connection in a slot the pool gave; the slot is given back if it fails."""
        scheme, host, port = origin
        context = None if scheme == "http" else self._tls_context()
        sni = request.extensions.get("sni_hostname", host) if context is not None else None
        loop = asyncio.get_running_loop()
        factory = partial(Http1Connection, origin, self._max_body_bytes)
        try:
            async with asyncio.timeout(timeout_s):
                _, connection = await loop.create_connection(
                    factory,
                    host,
                    port,
                    ssl=context,
                    server_hostname=sni,
                    # RFC 8305: an address family whose route drops packets costs 0.25 s, not
                    # the whole connect timeout
                    happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY_S,
                    interleave=1,
                )
        except TimeoutError as exc:
            self._pool.give_back_slot()
            raise httpx.ConnectTimeout(f"{host}:{port}: no connection within {timeout_s}s") from exc
        except OSError as exc:  # refused, unreachable, DNS (gaierror), TLS (ssl.SSLError)
            self._pool.give_back_slot()
            raise httpx.ConnectError(f"{host}:{port}: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            self._pool.give_back_slot()
            raise
        self._pool.add(connection)
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context()
            self._ssl_context.set_alpn_protocols(["http/1.1"])
        return self._ssl_context


def _origin_of(url: httpx.URL) -> Origin:
    scheme = url.scheme
    if scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"{scheme!r} URLs are not supported: {url}")
    if not url.host:
        raise httpx.UnsupportedProtocol(f"no host in the URL {url}")
    return scheme, url.host, url.port or _DEFAULT_PORTS[scheme]


def _head_of(request: httpx.Request) -> bytes:
    """The request line and headers, as httpx set them (Host, Content-Length included)."""
    raw = request.headers.raw
    method = _METHODS.get(request.method) or request.method.encode("ascii")
    if not raw:
        return b"%s %s HTTP/1.1\r\n\r\n" % (method, request.url.raw_path)
    lines = b"\r\n".join([name + b": " + value for name, value in raw])
    # a CR or LF inside a name or value would end the header early: refuse it
    if lines.count(b"\n") != len(raw) - 1 or lines.count(b"\r") != len(raw) - 1:
        raise httpx.LocalProtocolError("a header name or value holds a CR or LF")
    return b"%s %s HTTP/1.1\r\n%s\r\n\r\n" % (method, request.url.raw_path, lines)


async def _body_of(request: httpx.Request) -> bytes:
    """The request body, read whole; framed as chunked when httpx said so (a stream)."""
    try:
        return request.content
    except httpx.RequestNotRead:
        body = await request.aread()
    if request.headers.get("transfer-encoding", "").lower() != "chunked":
        return body
    if not body:
        return b"0\r\n\r\n"
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
