"""A destination's HTTP client: httpx's API over aiohttp's connection pool, TLS from its keys."""

from __future__ import annotations

import httpx
from httpx_aiohttp import AiohttpTransport

from config.destination import Destination


def http_client(
    dest: Destination, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """The destination's HTTP client: pooled, at most `max_in_flight` connections.

    TLS: the context of the destination's `tls_*` keys (its CA, its client certificate) when set,
    else httpx's default trust store; certificates and host names are verified either way.
    """
    limits = httpx.Limits(
        max_connections=dest.max_in_flight, max_keepalive_connections=dest.max_in_flight
    )
    verify = dest.ssl_context() or True
    return httpx.AsyncClient(
        timeout=httpx.Timeout(dest.request_timeout_s),
        limits=limits,
        verify=verify,
        follow_redirects=dest.follow_redirects,
        # httpx's API over aiohttp's connection pool: httpcore's pool re-polls every idle socket
        # and takes anyio locks on each request (encode/httpx#3215): more CPU per request
        # (docs/performance.md).
        transport=transport or AiohttpTransport(verify=verify, limits=limits),
        headers={"User-Agent": "hifi-connector"},
    )
