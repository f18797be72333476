"""OAuth2 access tokens by the client-credentials grant (RFC 6749 4.4): fetched, refreshed ahead
of expiry by one fetch at a time, and masked wherever hifi writes text.

A `TokenSource` is an async context manager that owns its HTTP client. `token()` returns a token
that is not due for refresh, fetching one when there is none or the current one is due:
refreshed at 80 % of its life or 60 s before it expires, whichever comes first, but never
before half its life (a 5 s token after 2.5 s, an hour's after 48 minutes). A token without
`expires_in` is refreshed only when the resource server refuses it: `refresh(stale)`. Callers
that ask at the same time wait for one fetch (single-flight); `refresh(stale)` of a token
already replaced returns the new one without fetching again.

Errors (`hifi.errors`): the token endpoint answering 4xx, or 2xx without a usable bearer token,
is `TokenRefused` (a `ConfigError`: the credentials or the token_url are wrong; exit 2); no
answer, a timeout, a 5xx (or 429), or a proxy's refusal (407) after the retries is
`TokenUnavailable` (transient). Their messages name the token_url and the client_id, never the
secret nor a token. Every token fetched and the client secret are registered with
`hifi.redaction`. Requests go through the proxy `proxies` picks, else httpx's from the
environment.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Self

import httpx
import msgspec
import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from hifi import redaction
from hifi.defaults import USER_AGENT
from hifi.errors import TokenRefused, TokenUnavailable

__all__ = ["ClientAuth", "ClientCredentials", "ProxyChooser", "Token", "TokenSource"]

log = structlog.get_logger(__name__)

ClientAuth = Literal["basic", "body"]
_REFRESH_AT_SHARE = 0.8  # of a token's life
_REFRESH_BEFORE_S = 60.0  # before it expires
_REFRESH_NOT_BEFORE_SHARE = 0.5  # of its life: a short-lived token is not fetched per request
_RETRY_FAILED_REFRESH_S = 1.0  # a refresh that failed while the token is still valid: again after
_ERROR_CHARS = 120
_NO_AUTH = httpx.Auth()  # httpx's base class sends the request as it is

#: the proxy a token request to a URL goes through (None: directly), e.g. a destination's
#: `connector.http1.proxy.ProxyRoutes.httpx_proxy`
ProxyChooser = Callable[[httpx.URL], httpx.Proxy | None]


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    """Who asks for tokens, where, and for what (the `[auth]` table of a destination)."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: tuple[str, ...] = ()
    audience: str | None = None
    #: "basic": client_id and client_secret in an HTTP Basic header (RFC 6749 2.3.1's
    #: preferred way); "body": as form fields of the request
    client_auth: ClientAuth = "basic"
    timeout_s: float = 10.0  # one request to the token endpoint
    attempts: int = 4  # requests per fetch while the endpoint fails transiently
    max_backoff_s: float = 2.0  # between those attempts (exponential, with jitter)

    def describe(self) -> str:
        """Who and where, for messages: no secret in it."""
        return f"token endpoint {self.token_url} (client_id {self.client_id!r})"


@dataclass(frozen=True, slots=True)
class Token:
    """An access token and when (on the `clock` of its source) it is due for refresh and expires;
    None for a token given without `expires_in`."""

    value: str = field(repr=False)
    refresh_at: float | None
    expires_at: float | None

    @classmethod
    def issued(cls, value: str, expires_in_s: float | None, now: float) -> Token:
        """A token received at `now` that lives `expires_in_s` seconds (None: unknown)."""
        if expires_in_s is None:
            return cls(value, None, None)
        ahead = min(_REFRESH_AT_SHARE * expires_in_s, expires_in_s - _REFRESH_BEFORE_S)
        refresh_in = max(_REFRESH_NOT_BEFORE_SHARE * expires_in_s, ahead)
        return cls(value, now + refresh_in, now + expires_in_s)


class TokenSource:
    """Tokens of one client: `async with TokenSource(credentials) as source: await source.token()`."""

    def __init__(
        self,
        credentials: ClientCredentials,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_fetch: Callable[[str], None] | None = None,
        proxies: ProxyChooser | None = None,
    ) -> None:
        """`ssl_context` for an https token_url (None: the default trust store);
        `on_fetch(reason)` is told of every fetch that got a token: "start" (the first),
        "expiring" (ahead of expiry) or "unauthorized" (`refresh` of a refused token);
        `proxies` picks each request's proxy (None: httpx's own choice, from HTTPS_PROXY,
        HTTP_PROXY, ALL_PROXY and NO_PROXY); `transport`, when given, is used as it is."""
        self.credentials = credentials
        self._transport = transport
        self._proxies = proxies
        self._verify: ssl.SSLContext | bool = ssl_context or True  # True: the default trust
        self._clock = clock
        self._sleep = sleep
        self._on_fetch = on_fetch
        self._client: httpx.AsyncClient | None = None
        self._current: Token | None = None
        self._previous: Token | None = None
        self._reason = "start"
        self._fetching: asyncio.Future[Token] | None = None
        self._retry_refresh_at = 0.0
        #: tokens fetched so far (whatever the callers), for tests and /status
        self.fetches = 0
        redaction.register([credentials.client_secret])

    async def __aenter__(self) -> Self:
        transport = self._transport
        if transport is None and self._proxies is not None:
            transport = _RoutedTransport(self._proxies, self._verify)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.credentials.timeout_s),
            transport=transport,
            verify=self._verify,
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        client, self._client = self._client, None
        if self._fetching is not None and not self._fetching.done():
            self._fetching.cancel()
        if client is not None:
            await client.aclose()

    async def token(self) -> str:
        """A token not yet due for refresh, fetched if needed; a failed refresh ahead of expiry
        keeps the current token until it expires (and tries again a second later)."""
        current = self._current
        if current is None:
            return (await self._fetch("start")).value
        now = self._clock()
        if current.refresh_at is None or now < max(current.refresh_at, self._retry_refresh_at):
            return current.value
        try:
            return (await self._fetch("expiring")).value
        except (TokenRefused, TokenUnavailable) as exc:
            if current.expires_at is None or self._clock() >= current.expires_at:
                raise
            self._retry_refresh_at = self._clock() + _RETRY_FAILED_REFRESH_S
            log.warning("token_refresh_failed", error=str(exc), keeps="the current token")
            return current.value

    async def refresh(self, stale: str) -> str:
        """A token other than `stale`, which the resource server refused: a new one, or the one
        another caller fetched meanwhile."""
        current = self._current
        if current is not None and current.value != stale:
            return current.value
        return (await self._fetch("unauthorized")).value

    async def _fetch(self, reason: str) -> Token:
        """One fetch for every caller waiting meanwhile (single-flight)."""
        if self._fetching is None:
            self._fetching = asyncio.ensure_future(self._fetch_with_retries())
            self._fetching.add_done_callback(self._fetched)
            self._reason = reason
        return await asyncio.shield(self._fetching)

    def _fetched(self, future: asyncio.Future[Token]) -> None:
        self._fetching = None
        if future.cancelled() or future.exception() is not None:
            return
        # the token before the one replaced stays masked: replies to requests that carried it
        # may still be arriving; older ones are forgotten, so months of rotation keep two
        if self._previous is not None and self._previous.value != future.result().value:
            redaction.forget([self._previous.value])
        self._previous, self._current = self._current, future.result()
        self._retry_refresh_at = 0.0
        self.fetches += 1
        if self._on_fetch is not None:
            self._on_fetch(self._reason)

    async def _fetch_with_retries(self) -> Token:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.credentials.attempts),
            wait=wait_random_exponential(multiplier=0.1, max=self.credentials.max_backoff_s),
            retry=retry_if_exception_type(TokenUnavailable),
            sleep=self._sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._request_token()
        raise AssertionError("unreachable: tenacity reraises the last failure")  # pragma: no cover

    async def _request_token(self) -> Token:
        """One POST to the token endpoint, its answer read into a `Token`."""
        if self._client is None:
            raise RuntimeError("TokenSource used outside `async with`")
        creds = self.credentials
        form = {"grant_type": "client_credentials"}
        if creds.scopes:
            form["scope"] = " ".join(creds.scopes)
        if creds.audience is not None:
            form["audience"] = creds.audience
        auth: httpx.Auth = httpx.BasicAuth(creds.client_id, creds.client_secret)
        if creds.client_auth == "body":
            auth = _NO_AUTH
            form |= {"client_id": creds.client_id, "client_secret": creds.client_secret}
        try:
            async with asyncio.timeout(creds.timeout_s):
                response = await self._client.post(creds.token_url, data=form, auth=auth)
        except (httpx.TransportError, TimeoutError) as exc:
            what = type(exc).__name__
            if isinstance(exc, TimeoutError | httpx.TimeoutException):
                what = f"timeout after {creds.timeout_s:g} s"
            elif isinstance(exc, httpx.ProxyError):  # its CONNECT refused: "407 Proxy Auth..."
                what = f"the proxy refused the tunnel: {exc}"
            raise TokenUnavailable(
                redaction.short_error(
                    f"{creds.describe()}: no answer{_through(self._proxy())}: {what}"
                )
            ) from exc
        return self._read(response, received_at=self._clock())

    def _proxy(self) -> str | None:
        """ "proxy http://host:port" when `proxies` sends token requests through one, else None."""
        proxy = (
            None if self._proxies is None else self._proxies(httpx.URL(self.credentials.token_url))
        )
        return None if proxy is None else f"proxy {proxy.url}"

    def _read(self, response: httpx.Response, *, received_at: float) -> Token:
        """The token of a 2xx answer; `TokenRefused` or `TokenUnavailable` for any other."""
        where, status = self.credentials.describe(), response.status_code
        if status == 429 or status >= 500:
            raise TokenUnavailable(redaction.short_error(f"{where}: answered HTTP {status}"))
        if status == 407:  # the proxy's answer, not the endpoint's: unreachable, as a delivery
            raise TokenUnavailable(
                f"{where}: {self._proxy() or 'the proxy'} answered 407 (proxy authentication"
                " required); check the user and password of the proxy URL"
            )
        if not 200 <= status < 300:
            raise TokenRefused(
                redaction.short_error(
                    f"{where} refused the client credentials: HTTP {status}{_oauth_error(response)}"
                    "; check client_id, client_secret, scopes, audience and client_auth"
                )
            )
        try:
            body = msgspec.json.decode(response.content)
        except msgspec.DecodeError:
            body = None
        value = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(value, str) or not value.strip():
            raise TokenRefused(
                f"{where}: answered {status} without an access_token; is token_url right?"
            )
        kind = body.get("token_type", "bearer") if isinstance(body, dict) else "bearer"
        redaction.register([value])
        if not isinstance(kind, str) or kind.lower() != "bearer":
            raise TokenRefused(
                f"{where}: answered a token of type {kind!r}; hifi sends Bearer tokens"
            )
        expires_in = body.get("expires_in") if isinstance(body, dict) else None
        if isinstance(expires_in, str) and expires_in.isascii() and expires_in.isdigit():
            expires_in = int(expires_in)  # some servers send it as a string
        if (
            not isinstance(expires_in, int | float)
            or isinstance(expires_in, bool)
            or expires_in <= 0
        ):
            expires_in = None
        return Token.issued(value, None if expires_in is None else float(expires_in), received_at)


class _RoutedTransport(httpx.AsyncBaseTransport):
    """httpx's own transports, one direct and one per proxy, each request sent by the one its
    proxy (as `choose` picks it) calls for."""

    def __init__(self, choose: ProxyChooser, verify: ssl.SSLContext | bool) -> None:
        self._choose = choose
        self._verify = verify
        self._direct = httpx.AsyncHTTPTransport(verify=verify)
        self._proxied: dict[tuple[str, bytes | None], httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        proxy = self._choose(request.url)
        if proxy is None:
            return await self._direct.handle_async_request(request)
        key = (str(proxy.url), proxy.headers.get("Proxy-Authorization", "").encode() or None)
        if key not in self._proxied:
            self._proxied[key] = httpx.AsyncHTTPTransport(verify=self._verify, proxy=proxy)
        return await self._proxied[key].handle_async_request(request)

    async def aclose(self) -> None:
        transports, self._proxied = [self._direct, *self._proxied.values()], {}
        for transport in transports:
            await transport.aclose()


def _through(proxy: str | None) -> str:
    return "" if proxy is None else f" through {proxy}"


def _oauth_error(response: httpx.Response) -> str:
    """`" (invalid_client: text)"` from an RFC 6749 5.2 error body, masked and shortened; or ''."""
    try:
        body = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        return ""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return ""
    description = body.get("error_description")
    text = body["error"] + (f": {description}" if isinstance(description, str) else "")
    return f" ({redaction.excerpt(text, _ERROR_CHARS)})"
