"""A destination's HTTP client: httpx's API over the connector's HTTP/1.1 transport, TLS from its keys."""

from __future__ import annotations

from http.cookiejar import CookieJar
from typing import Any

import httpx

from config.destination import Destination
from connector.http1 import Http1Transport


class _Cookieless(httpx.Cookies):
    """A jar that keeps no cookie a reply sets; cookies given to it are still sent."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class DestinationClient(httpx.AsyncClient):
    """httpx's client, except that a destination's `Set-Cookie` is neither kept nor sent back.

    The connector posts batches and holds no session; httpx would otherwise wrap every reply
    and its request for `http.cookiejar`, a large share of its CPU per request
    (`python -m bench.http_cost`)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._cookieless = _Cookieless(settings.get("cookies"))

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookieless

    @cookies.setter
    def cookies(
        self, cookies: httpx.Cookies | CookieJar | dict[str, str] | list[tuple[str, str]]
    ) -> None:
        self._cookieless = _Cookieless(cookies)


def http_client(
    dest: Destination, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """The destination's HTTP client: pooled, at most `max_in_flight` connections.

    TLS: the context of the destination's `tls_*` keys (its CA, its client certificate) when set,
    else httpx's default trust store; certificates and host names are verified either way.
    `transport`: another transport in its place (tests: respx, `httpx.MockTransport`).
    """
    limits = httpx.Limits(
        max_connections=dest.max_in_flight, max_keepalive_connections=dest.max_in_flight
    )
    return DestinationClient(
        timeout=httpx.Timeout(dest.request_timeout_s),
        follow_redirects=dest.follow_redirects,
        # httpcore's pool re-polls every idle socket and takes anyio locks on each request
        # (encode/httpx#3215), aiohttp's under httpx adds a layer of its own: the connector's
        # transport writes each request once and parses the reply in the protocol's callbacks.
        transport=transport or Http1Transport(ssl_context=dest.ssl_context(), limits=limits),
        headers={"User-Agent": "hifi-connector"},
    )
