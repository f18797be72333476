"""A destination's HTTP client: httpx's API over the connector's HTTP/1.1 transport, TLS from its keys."""

from __future__ import annotations

from http.cookiejar import CookieJar
from typing import Any

import httpx

from config.destination import Destination
from config.tls_files import tls_context
from connector.http1 import Http1Transport
from connector.http1.proxy import ProxyRoutes
from hifi.defaults import USER_AGENT


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
    Redirects and proxies are the transport's (`destination_transport`): httpx's client never
    follows a redirect itself, and ignores the environment's proxies when given a transport.
    `transport`: another transport in its place (tests: respx, `httpx.MockTransport`).
    """
    return DestinationClient(
        timeout=httpx.Timeout(dest.request_timeout_s),
        follow_redirects=False,
        transport=transport or destination_transport(dest),
        headers={"User-Agent": USER_AGENT},
    )


def destination_transport(dest: Destination) -> Http1Transport:
    """The connector's transport for `dest`: its TLS, redirect and proxy settings.

    httpcore's pool re-polls every idle socket and takes anyio locks on each request
    (encode/httpx#3215), aiohttp's under httpx adds a layer of its own: the connector's
    transport writes each request once and parses the reply in the protocol's callbacks."""
    context = dest.ssl_context()
    bare = None
    if dest.tls_client_cert is not None:  # a redirect to an untrusted origin: no certificate
        bare = tls_context(dest.tls_ca_file, None, None)
    proxy = dest.proxy.get_secret_value() if dest.proxy is not None else None
    return Http1Transport(
        ssl_context=context,
        bare_ssl_context=bare,
        limits=httpx.Limits(
            max_connections=dest.max_in_flight, max_keepalive_connections=dest.max_in_flight
        ),
        follow_redirects=dest.follow_redirects,
        trusted_origins=frozenset(dest.redirect_trusted_origins),
        proxies=ProxyRoutes.from_settings(proxy),
    )
