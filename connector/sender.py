"""How a delivery request leaves: a route's headers prepared once, each request handed to the
connector's HTTP/1.1 transport as bytes.

`Http1Sender` is the connector's: it drives `connector.http1` through its own interface
(`Http1Transport.send`), so a request costs no `httpx.Request`, header merging, auth and
redirect layers, nor an `httpx.Response` (a third of a request's CPU in issue 29's profile).
Everything the real web needs stays where it was, in the transport: redirects, proxies,
bounded replies, lenient parsing, a tenant's addresses checked. `HttpxSender` sends through an
httpx client instead, for a destination given another transport (tests: respx, a mock).
Either raises httpx's transport exceptions, as the transport does.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx

from config.destination import Destination
from connector.http1 import Http1Transport
from connector.http1.connection import Origin
from connector.http1.decoding import Answer, answer_of
from connector.http1.redirects import Outgoing, origin_of
from connector.http_client import destination_transport, http_client
from connector.rebatch import Target
from connector.webhooks import body_content_type
from hifi.defaults import USER_AGENT

__all__ = [
    "DEFAULT_HEADERS",
    "Http1Sender",
    "HttpxSender",
    "Route",
    "Routes",
    "Sender",
    "opened_sender",
]

#: tenant routes kept prepared (a changed tenant entry is a new route; the oldest goes first)
MAX_TENANT_ROUTES = 4096

#: headers each request writes itself: a route's of the same name (in any case) are not sent
_OWN_PER_REQUEST = frozenset({b"content-length", b"idempotency-key"})
#: what every request carries unless the route's headers say otherwise (httpx's defaults with
#: hifi's User-Agent; the replies' codings the connector decodes, within bounds)
DEFAULT_HEADERS = (
    ("Accept", "*/*"),
    ("Accept-Encoding", "gzip, deflate"),
    ("Connection", "keep-alive"),
    ("User-Agent", USER_AGENT),
)


@dataclass(frozen=True, slots=True)
class Route:
    """A URL and its headers, prepared once for every request to it: the destination's own, or
    a tenant's. `public_only`: its host may resolve only to public addresses."""

    url: httpx.URL
    origin: Origin
    given: Mapping[str, str]  # the headers as the catalog or the tenant entry gave them
    raw: list[tuple[bytes, bytes]]  # Host, the defaults and `given`, as written: no length
    public_only: bool
    authorized: bool = False  # `raw` has an Authorization (the headers', or the URL's)

    @classmethod
    def of(cls, url: str, headers: Mapping[str, str], *, public_only: bool = False) -> Route:
        """The route of `url` with `headers` (they replace a default of the same name, in any
        case), and credentials in the URL as Basic `Authorization`, as httpx's client sends
        them, unless the headers name one. `httpx.UnsupportedProtocol` for a URL that is not
        http or https, `httpx.InvalidURL` for one that does not parse."""
        parsed = httpx.URL(url)
        merged = httpx.Headers(DEFAULT_HEADERS)
        merged.update(headers)
        if (parsed.username or parsed.password) and "authorization" not in merged:
            basic = httpx.BasicAuth(parsed.username, parsed.password)
            merged["Authorization"] = next(basic.auth_flow(httpx.Request("POST", parsed))).headers[
                "Authorization"
            ]
        request = httpx.Request("POST", parsed, headers=merged)  # Host as httpx writes it
        own = _OWN_PER_REQUEST
        raw = [(name, value) for name, value in request.headers.raw if name.lower() not in own]
        authorized = "authorization" in merged
        return cls(parsed, origin_of(parsed), headers, raw, public_only, authorized)


class Routes:
    """A destination's routes, each prepared on its first request: its own URL with the
    catalog's headers, and each tenant route's (`Target`: compared by identity) with its
    entry's, which may reach only public addresses unless `allow_private_destinations`. Both
    carry the body's Content-Type (and Content-Encoding, with gzip)."""

    def __init__(self, dest: Destination) -> None:
        self._dest = dest
        self._body_headers = {"Content-Type": body_content_type(dest)}
        if dest.compression == "gzip":
            self._body_headers["Content-Encoding"] = "gzip"
        self._public_only = not dest.allow_private_destinations
        self._own_headers = {**dest.header_values(), **self._body_headers}
        self._own: Route | None = None
        self._tenants: dict[int, tuple[Target, Route]] = {}

    def of(self, target: Target | None) -> Route:
        """The route of a batch's target (None: the destination's own); raises as `Route.of`."""
        if target is None:
            if self._own is None:
                self._own = Route.of(self._dest.url, self._own_headers)
            return self._own
        found = self._tenants.get(id(target))
        if found is not None and found[0] is target:
            return found[1]
        headers = {**target.headers, **self._body_headers}
        route = Route.of(target.url, headers, public_only=self._public_only)
        if len(self._tenants) >= MAX_TENANT_ROUTES:
            del self._tenants[next(iter(self._tenants))]
        self._tenants[id(target)] = (target, route)
        return route


class Sender(Protocol):
    """Sends one POST of a route, with the request's own headers (`extra`); its answer."""

    async def post(self, route: Route, body: bytes, extra: Sequence[tuple[str, str]]) -> Answer: ...


class Http1Sender:
    """The connector's sender: straight to `Http1Transport.send`, each attempt (redirect hops
    included) bounded by `timeout_s`."""

    def __init__(self, transport: Http1Transport, *, timeout_s: float) -> None:
        self._transport = transport
        self._timeout_s = timeout_s

    async def post(self, route: Route, body: bytes, extra: Sequence[tuple[str, str]]) -> Answer:
        headers = route.raw.copy()
        headers.append((b"Content-Length", b"%d" % len(body)))
        for name, value in extra:
            if route.authorized and name.lower() == "authorization":  # the request's own wins
                headers = [field for field in headers if field[0].lower() != b"authorization"]
            headers.append((name.encode("ascii"), value.encode("ascii")))
        request = Outgoing(b"POST", route.url, route.origin, headers, body)
        reply = await self._transport.send(
            request, timeout_s=self._timeout_s, public_only=route.public_only
        )
        return answer_of(reply)


class HttpxSender:
    """A sender through an httpx client (over another transport: respx, a mock), the request's
    bounds passed as the connector's transport reads them (`hifi.total_timeout_s`,
    `hifi.public_only`)."""

    def __init__(self, client: httpx.AsyncClient, *, timeout_s: float) -> None:
        self._client = client
        self._extensions = {"hifi.total_timeout_s": timeout_s}
        self._public_extensions = {**self._extensions, "hifi.public_only": True}

    async def post(self, route: Route, body: bytes, extra: Sequence[tuple[str, str]]) -> Answer:
        response = await self._client.post(
            route.url,
            content=body,
            headers={**route.given, **dict(extra)},
            extensions=self._public_extensions if route.public_only else self._extensions,
        )
        return Answer.of_response(response)


@contextlib.asynccontextmanager
async def opened_sender(
    dest: Destination, transport: httpx.AsyncBaseTransport | None = None
) -> AsyncIterator[Sender]:
    """The destination's sender, its connections closed when the block ends: the connector's
    transport (`destination_transport`, or `transport` when it is one), else an httpx client
    over `transport`."""
    if transport is None or isinstance(transport, Http1Transport):
        own = transport or destination_transport(dest)
        try:
            yield Http1Sender(own, timeout_s=dest.request_timeout_s)
        finally:
            await own.aclose()
        return
    async with http_client(dest, transport) as client:
        yield HttpxSender(client, timeout_s=dest.request_timeout_s)
