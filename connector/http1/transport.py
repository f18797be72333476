"""httpx's transport over asyncio connections: HTTP/1.1, keep-alive, TLS, proxies, httpx's timeouts.

httpx's client (timeouts, auth, exceptions, respx in tests) over a lean exchange: the request's
head and body in one write, the response parsed by httptools in the protocol's callbacks.
What meets the real web lives here, so any request path over this transport keeps it:
redirects (`connector.http1.redirects`: 307/308 only, secrets kept to their origin), replies
read within bounds (`connector.http1.decoding`), lenient parsing (`connector.http1.connection`),
proxies (`connector.http1.proxy`), a tenant's addresses checked (`connector.http1.addresses`)
and TLS refusals named (`connector.http1.tls_refusals`).

Failures are httpx's exceptions: `ConnectError` (refused, DNS, TLS handshake, a proxy's refusal;
the `OSError` or `ssl.SSLError` as its `__cause__`) or `ConnectTimeout` when no request left,
`WriteTimeout`, `ReadTimeout`, `RemoteProtocolError` or `ReadError` once one did, `PoolTimeout`
when no connection was free in time, `ForbiddenAddress` when a checked host resolves to an
address it may not reach.

A request is sent once, except on a reused keep-alive connection that failed before any reply
byte came (the peer had closed it while idle): then once more, on a new connection.
"""

from __future__ import annotations

import asyncio
import ssl
from functools import partial

import httpx

from connector.http1.addresses import addresses_of, public_addresses
from connector.http1.connection import Http1Connection, PoolKey
from connector.http1.decoding import response_of
from connector.http1.eyeballs import first_connected
from connector.http1.pool import ConnectionPool
from connector.http1.proxy import Proxy, ProxyRoutes, open_tunnel
from connector.http1.redirects import FOLLOWED_STATUSES, MAX_HOPS, Outgoing, next_hop, origin_of
from connector.http1.reply import Reply
from connector.http1.timeouts import Timeouts
from connector.http1.tls_refusals import tls_refusal

__all__ = ["MAX_BODY_BYTES", "Http1Transport"]

#: response bytes kept: a destination's body is only read for an error message
MAX_BODY_BYTES = 1024 * 1024
_HAPPY_EYEBALLS_DELAY_S = 0.25  # as aiohttp and httpcore race a host's addresses
_METHODS = {name: name.encode("ascii") for name in ("POST", "GET", "HEAD", "PUT")}
_DEFAULT_LIMITS = httpx.Limits()
#: failures of a reused connection that, before any reply byte, mean the peer had closed it
_STALE = (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)
_MAY_WANT_A_CERTIFICATE = "the destination may require a client certificate (tls_client_cert)"


class Http1Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 to any origin, over a keep-alive pool bounded by `limits`.

    `ssl_context`: the TLS settings of https origins (trust, client certificate); None: httpx's
    default context (certifi's roots, host names verified), made on the first https request.
    `bare_ssl_context`: with a client certificate in `ssl_context`, the same trust without it,
    for a redirect to an origin not trusted (None: `ssl_context` has no client certificate).
    Host names are checked against the URL's host, or the `sni_hostname` request extension.
    Response bodies are kept up to `max_body_bytes`; a longer one is cut there and its
    connection closed.

    `follow_redirects`: 307 and 308 are followed, at most 3 hops; `trusted_origins`
    (`scheme://host:port`) may receive the request's secrets on such a hop. `proxies`: where
    requests go through a proxy (None: never). A request with the `hifi.public_only` extension
    set connects only to public addresses of its host; one with `hifi.total_timeout_s` must be
    answered whole (redirect hops included) within that time, or fails with `ReadTimeout`
    (`ConnectTimeout`, `PoolTimeout` before it is sent) unless a 2xx status line came.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        bare_ssl_context: ssl.SSLContext | None = None,
        limits: httpx.Limits = _DEFAULT_LIMITS,
        max_body_bytes: int = MAX_BODY_BYTES,
        follow_redirects: bool = False,
        trusted_origins: frozenset[str] = frozenset(),
        proxies: ProxyRoutes | None = None,
    ) -> None:
        self._ssl_context = ssl_context
        self._bare_ssl_context = bare_ssl_context or ssl_context
        for context in (ssl_context, bare_ssl_context):
            if context is not None:
                context.set_alpn_protocols(["http/1.1"])
        self._client_cert = bare_ssl_context is not None
        self._pool = ConnectionPool(limits)
        self._max_body_bytes = max_body_bytes
        self._follow = follow_redirects
        self._trusted = trusted_origins
        self._proxies = proxies or None  # no proxy for any scheme: none to look up

    @property
    def open_connections(self) -> int:
        """Connections open, being opened or in use now (at most `max_connections`)."""
        return self._pool.open_count

    def proxy_for(self, url: httpx.URL) -> Proxy | None:
        """The proxy a request to `url` goes through; None: direct."""
        if self._proxies is None:
            return None
        return self._proxies.proxy_for(*origin_of(url))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            reply = await self._send(request)
        except httpx.TransportError as exc:
            exc.request = request
            raise
        return response_of(reply)

    async def aclose(self) -> None:
        """Close every connection; the transport serves no request afterwards."""
        await self._pool.aclose()

    async def send(
        self, request: Outgoing, *, timeout_s: float, public_only: bool = False
    ) -> Reply:
        """The connector's own way in, without httpx's request and response: `request` (its
        headers with Host and Content-Length) and the 307/308 hops it is asked to make, each
        phase and the whole within `timeout_s`. What is said of the class holds: the same
        exceptions, redirects, bounds and proxies."""
        timeouts = Timeouts.within_s(timeout_s)
        return await self._follow_hops(request, timeouts, public_only, None)

    async def _send(self, request: httpx.Request) -> Reply:
        """The request, and the 307/308 hops it is asked to make when following them."""
        timeouts = Timeouts.of(request.extensions)
        public_only = bool(request.extensions.get("hifi.public_only"))
        method = _METHODS.get(request.method) or request.method.encode("ascii")
        first = Outgoing(
            method,
            request.url,
            origin_of(request.url),
            request.headers.raw,
            await _body_of(request),
        )
        sni = request.extensions.get("sni_hostname")
        return await self._follow_hops(first, timeouts, public_only, sni)

    async def _follow_hops(
        self, first: Outgoing, timeouts: Timeouts, public_only: bool, sni: str | None
    ) -> Reply:
        reply = await self._exchange(first, timeouts, public_only, sni)
        sent, hops = first, 0
        while self._follow and reply.status in FOLLOWED_STATUSES and hops < MAX_HOPS:
            hop = next_hop(sent, first.origin, _header(reply, b"location"), self._trusted)
            if hop is None:
                reply.anomalies.append("location")
                break
            sent, hops = hop, hops + 1
            reply = await self._exchange(hop, timeouts, public_only, None)
        return reply

    async def _exchange(
        self, sent: Outgoing, timeouts: Timeouts, public_only: bool, sni: str | None
    ) -> Reply:
        proxy = None if self._proxies is None else self._proxies.proxy_for(*sent.origin)
        how = ("bare " if sent.bare else "") + ("public " if public_only else "")
        key: PoolKey = (*sent.origin, how + (proxy.display if proxy is not None else ""))
        head = _head_of(sent, proxy)
        pool, fresh = self._pool, False
        while True:
            connection = await pool.acquire(key, timeouts.within(timeouts.pool_s), fresh=fresh)
            reused = connection is not None
            if connection is None:
                connection = await self._open(key, sent, proxy, public_only, sni, timeouts)
            elif not connection.usable:  # closed since it was put back: nothing was written
                pool.discard(connection)
                continue
            try:
                reply = await connection.exchange(
                    head,
                    sent.body,
                    head_only=sent.method == b"HEAD",
                    write_timeout_s=timeouts.within(timeouts.write_s),
                    read_timeout_s=timeouts.read_s,
                    deadline_s=timeouts.deadline_s,
                )
            except _STALE as exc:
                pool.discard(connection)
                if reused and not fresh and connection.received_bytes == 0:
                    fresh = True  # the peer closed it while idle: once more, on a new one
                    continue
                silent = connection.received_bytes == 0 and not reused
                raise self._named(exc, sent, silent=silent) from exc.__cause__
            except BaseException:
                pool.discard(connection)
                raise
            pool.release(connection, reusable=reply.reusable)
            return reply

    async def _open(
        self,
        key: PoolKey,
        sent: Outgoing,
        proxy: Proxy | None,
        public_only: bool,
        sni: str | None,
        timeouts: Timeouts,
    ) -> Http1Connection:
        """A new connection in a slot the pool gave; the slot is given back if it fails."""
        scheme, host, port = sent.origin
        context = None if scheme == "http" else self._tls_context(bare=sent.bare)
        hostname = (sni or host) if context is not None else None
        factory = partial(Http1Connection, key, self._max_body_bytes)
        timeout_s = timeouts.within(timeouts.connect_s)
        try:
            async with asyncio.timeout(timeout_s):
                addresses = await public_addresses(host, port) if public_only else None
                connection = await _connect(factory, sent, proxy, addresses, context, hostname)
        except TimeoutError as exc:
            self._pool.give_back_slot()
            raise httpx.ConnectTimeout(f"{host}:{port}: no connection within {timeout_s}s") from exc
        except OSError as exc:  # refused, unreachable, DNS (gaierror), TLS (ssl.SSLError)
            self._pool.give_back_slot()
            client_cert = self._client_cert and not sent.bare
            said = tls_refusal(exc, client_cert=client_cert) or _said(exc)
            if context is not None and not client_cert and isinstance(exc, ConnectionResetError):
                said = f"TLS: {_MAY_WANT_A_CERTIFICATE} (reset in the handshake: {said})"
            raise httpx.ConnectError(f"{host}:{port}: {said}") from exc
        except BaseException:
            self._pool.give_back_slot()
            raise
        self._pool.add(connection)
        return connection

    def _named(self, exc: httpx.TransportError, sent: Outgoing, *, silent: bool) -> Exception:
        """`exc`, or the same kind of error naming the TLS refusal it was. `silent`: a new
        connection that ended before any reply byte came."""
        client_cert = self._client_cert and not sent.bare
        said = tls_refusal(exc.__cause__, client_cert=client_cert)
        if said is None and silent and sent.origin[0] == "https" and not client_cert:
            # a TLS 1.3 server checks the client's certificate after the client's handshake
            # ended; one that closes without its alert (asyncio's own) leaves only this
            said = f"TLS: {_MAY_WANT_A_CERTIFICATE} (closed after the handshake: {exc})"
        return exc if said is None else type(exc)(said)

    def _tls_context(self, *, bare: bool) -> ssl.SSLContext:
        if bare:
            if self._bare_ssl_context is None:
                self._bare_ssl_context = _default_context()
            return self._bare_ssl_context
        if self._ssl_context is None:
            self._ssl_context = _default_context()
        return self._ssl_context


async def _connect(
    factory: partial[Http1Connection],
    sent: Outgoing,
    proxy: Proxy | None,
    addresses: list[tuple[int, str]] | None,
    context: ssl.SSLContext | None,
    hostname: str | None,
) -> Http1Connection:
    """A connection to the request's origin: direct (to checked addresses when given), to an
    http proxy that takes absolute-form requests, or through a proxy's CONNECT tunnel."""
    loop = asyncio.get_running_loop()
    scheme, host, port = sent.origin
    if proxy is not None and scheme == "http":
        _, connection = await loop.create_connection(factory, proxy.host, proxy.port)
        return connection
    if proxy is not None:
        raw = await open_tunnel(proxy, host, port, timeout_s=None)  # the caller bounds it
        connection = factory()
        try:
            tls = await loop.start_tls(raw, connection, context, server_hostname=hostname)  # type: ignore[arg-type]
        except BaseException:
            raw.abort()
            raise
        assert tls is not None
        connection.connection_made(tls)
        return connection
    if addresses is None:
        addresses = await addresses_of(host, port)
    return await _connect_first(factory, addresses, port, context, hostname)


async def _connect_first(
    factory: partial[Http1Connection],
    addresses: list[tuple[int, str]],
    port: int,
    context: ssl.SSLContext | None,
    hostname: str | None,
) -> Http1Connection:
    """A connection to the first of the addresses that answers (the checked ones: never to
    the name, which could resolve elsewhere by now). RFC 8305: an address whose route drops
    packets costs 0.25 s, not the whole connect timeout (`eyeballs.first_connected`); a TLS
    refusal is the answer of an address that answered."""
    loop = asyncio.get_running_loop()

    async def attempt(address: str) -> Http1Connection:
        _, connection = await loop.create_connection(
            factory, address, port, ssl=context, server_hostname=hostname
        )
        return connection

    return await first_connected(
        [partial(attempt, address) for _, address in addresses],
        delay_s=_HAPPY_EYEBALLS_DELAY_S,
        close=Http1Connection.close,
        final=(ssl.SSLError,),
    )


def _default_context() -> ssl.SSLContext:
    context = httpx.create_ssl_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


def _said(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc}"


def _header(reply: Reply, name: bytes) -> bytes | None:
    """The value of a reply header (the first, if repeated); None if absent."""
    for key, value in reply.headers:
        if key.lower() == name:
            return value
    return None


def _head_of(sent: Outgoing, proxy: Proxy | None) -> bytes:
    """The request line and headers, as httpx set them (Host, Content-Length included); the
    absolute form and the proxy's credentials for an http request through a proxy."""
    raw = sent.headers
    target = sent.url.raw_path
    if proxy is not None and sent.origin[0] == "http":
        target = b"http://%s%s" % (sent.url.netloc, target)
        if proxy.authorization is not None:
            raw = [*raw, (b"Proxy-Authorization", proxy.authorization)]
    if not raw:
        return b"%s %s HTTP/1.1\r\n\r\n" % (sent.method, target)
    lines = b"\r\n".join([name + b": " + value for name, value in raw])
    # a CR or LF inside a name or value would end the header early: refuse it
    if lines.count(b"\n") != len(raw) - 1 or lines.count(b"\r") != len(raw) - 1:
        raise httpx.LocalProtocolError("a header name or value holds a CR or LF")
    return b"%s %s HTTP/1.1\r\n%s\r\n\r\n" % (sent.method, target, lines)


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
