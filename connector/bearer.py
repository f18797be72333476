"""The connector's side of a destination's `[auth]`: a bearer token for each request, fetched
at start, refreshed ahead of expiry and once after a 401, refreshes counted.

`started(dest)` fetches the first token: a refusal there ends the connector with one line and
exit 2 (`TokenRefused` is a `ConfigError`). Once running, a token that cannot be had is the
destination's trouble, not its events': it is a `DestinationUnavailable` (retried locally, then
handed to the retrier), never a dead letter.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import structlog

from config.destination import Destination
from connector import metrics
from connector.http1.proxy import ProxyRoutes
from hifi.errors import DestinationUnavailable, TokenRefused, TokenUnavailable
from hifi.oauth2 import TokenSource

log = structlog.get_logger(__name__)


class Bearer:
    """Authorization header values of one destination's requests, from its token source; the
    deliverer's send loop (`connector.delivery`) asks for a token before each post, and for a
    fresh one after a 401."""

    def __init__(self, source: TokenSource) -> None:
        self._source = source

    async def token(self) -> str:
        """The token to send now; `DestinationUnavailable` when none can be had."""
        try:
            return await self._source.token()
        except (TokenRefused, TokenUnavailable) as exc:
            raise DestinationUnavailable(f"no OAuth2 token: {exc}") from exc

    async def refresh(self, stale: str) -> str:
        """A token other than `stale`, which the destination refused (401)."""
        try:
            return await self._source.refresh(stale)
        except (TokenRefused, TokenUnavailable) as exc:
            raise DestinationUnavailable(f"no OAuth2 token after a 401: {exc}") from exc


def token_source(
    dest: Destination, transport: httpx.AsyncBaseTransport | None = None
) -> TokenSource:
    """The token source of `dest`'s `[auth]`, its fetches after the first counted
    (`hifi_connector_auth_refreshes_total`); `dest` must have `[auth]`. Its requests take the
    route deliveries take (`proxy_routes`); `ProxyConfigError` (exit 2) for an unusable
    proxy variable."""
    if dest.auth is None:
        raise ValueError(f"destination {dest.name!r} has no [auth]")
    name = dest.name

    def counted(reason: str) -> None:
        if reason != "start":
            metrics.AUTH_REFRESHES.labels(name, reason).inc()
        log.info("token_fetched", reason=reason)

    return TokenSource(
        dest.auth.credentials(),
        transport=transport,
        ssl_context=dest.ssl_context(),
        on_fetch=counted,
        proxies=proxy_routes(dest).httpx_proxy,
    )


def proxy_routes(dest: Destination) -> ProxyRoutes:
    """The proxies of `dest`'s requests, token requests included: its catalog `proxy`, else
    HTTPS_PROXY / HTTP_PROXY / ALL_PROXY; NO_PROXY either way."""
    return ProxyRoutes.from_settings(None if dest.proxy is None else dest.proxy.get_secret_value())


@contextlib.asynccontextmanager
async def started(
    dest: Destination, transport: httpx.AsyncBaseTransport | None = None
) -> AsyncIterator[Bearer | None]:
    """`dest`'s bearer with its first token fetched (None without `[auth]`); `TokenRefused`
    (exit 2) or `TokenUnavailable` when the token endpoint gives none."""
    if dest.auth is None:
        yield None
        return
    async with token_source(dest, transport) as source:
        await source.token()
        yield Bearer(source)
