"""The shared OAuth2 token module against a real loopback token endpoint (respx where no server
can answer): the grant, refresh ahead of expiry, single-flight, refusals, retries, masking."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest
import respx
import structlog

from hifi import redaction
from hifi.errors import ConfigError, TokenRefused, TokenUnavailable
from hifi.oauth2 import ClientCredentials, Token, TokenSource
from tests.hifi.oauth2_server import OAuth2Server


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _no_sleep(_seconds: float) -> None:
    await asyncio.sleep(0)


@pytest.fixture
async def server() -> AsyncIterator[OAuth2Server]:
    async with OAuth2Server() as running:
        yield running


def _credentials(server: OAuth2Server, **changes: object) -> ClientCredentials:
    creds = ClientCredentials(
        token_url=server.token_url,
        client_id=server.client_id,
        client_secret=server.client_secret,
        scopes=("events:write", "events:read"),
        audience="https://collector.test",
    )
    return replace(creds, **changes)  # type: ignore[arg-type]


def test_refresh_point_is_eighty_percent_or_a_minute_before_never_before_half() -> None:
    """An hour's token is refreshed at 80 % of its life, a 200 s one a minute before it expires,
    a 5 s one at half its life; one without expires_in only on demand."""
    assert Token.issued("t", 3600, now=0).refresh_at == pytest.approx(2880)
    assert Token.issued("t", 200, now=10).refresh_at == pytest.approx(150)
    assert Token.issued("t", 5, now=0).refresh_at == pytest.approx(2.5)
    assert Token.issued("t", 5, now=0).expires_at == pytest.approx(5)
    assert Token.issued("t", None, now=0).refresh_at is None


async def test_basic_auth_grant_with_scopes_and_audience(server: OAuth2Server) -> None:
    """The grant is a form POST with scope space-joined and audience, the client by HTTP Basic;
    the token is reused until it is due."""
    async with TokenSource(_credentials(server)) as source:
        first = await source.token()
        assert await source.token() == first
    assert first == server.issued[0]
    (request,) = server.token_requests
    assert request.form == {
        "grant_type": "client_credentials",
        "scope": "events:write events:read",
        "audience": "https://collector.test",
    }
    basic = base64.b64encode(f"{server.client_id}:{server.client_secret}".encode()).decode()
    assert request.authorization == f"Basic {basic}"


async def test_body_client_auth_sends_the_client_in_the_form(server: OAuth2Server) -> None:
    """With client_auth = "body" client_id and client_secret are form fields, no Basic header."""
    async with TokenSource(_credentials(server, client_auth="body", scopes=())) as source:
        assert await source.token() == server.issued[0]
    (request,) = server.token_requests
    assert request.authorization is None
    assert request.form["client_id"] == server.client_id
    assert request.form["client_secret"] == server.client_secret
    assert "scope" not in request.form


async def test_refreshes_ahead_of_expiry(server: OAuth2Server) -> None:
    """A 100 s token is kept for 50 s (half its life; a minute before would be earlier), then
    replaced by one fetch, reported as "expiring"."""
    server.declared_expires_in = 100
    clock, reasons = Clock(), list[str]()
    async with TokenSource(_credentials(server), clock=clock, on_fetch=reasons.append) as source:
        first = await source.token()
        clock.now += 49
        assert await source.token() == first
        clock.now += 2
        second = await source.token()
        assert second != first
        assert await source.token() == second
    assert server.issued == [first, second]
    assert reasons == ["start", "expiring"]
    assert source.fetches == 2


async def test_token_without_expiry_is_refreshed_on_refusal_only(server: OAuth2Server) -> None:
    """Without expires_in a token is kept however long; `refresh(stale)` fetches once, and a
    refresh of a token already replaced returns the new one without fetching."""
    server.declared_expires_in = None
    clock, reasons = Clock(), list[str]()
    async with TokenSource(_credentials(server), clock=clock, on_fetch=reasons.append) as source:
        first = await source.token()
        clock.now += 86_400
        assert await source.token() == first
        second = await source.refresh(first)
        assert second != first
        assert await source.refresh(first) == second  # a late 401 of the old token
    assert len(server.token_requests) == 2
    assert reasons == ["start", "unauthorized"]


async def test_twenty_concurrent_callers_share_one_fetch(server: OAuth2Server) -> None:
    """20 callers asking at once, at start and again after a 401, each wait for one fetch."""
    server.delay_s = 0.05
    async with TokenSource(_credentials(server)) as source:
        tokens = await asyncio.gather(*(source.token() for _ in range(20)))
        assert set(tokens) == {server.issued[0]}
        assert len(server.token_requests) == 1
        refreshed = await asyncio.gather(*(source.refresh(tokens[0]) for _ in range(20)))
        assert set(refreshed) == {server.issued[1]}
    assert len(server.token_requests) == 2


async def test_refused_credentials_are_one_line_naming_the_endpoint(server: OAuth2Server) -> None:
    """A wrong secret is refused (4xx): not retried, a ConfigError (exit 2) naming the
    token_url and client_id and the OAuth2 error, never the secret."""
    wrong = "wrong-" + server.client_secret
    async with TokenSource(_credentials(server, client_secret=wrong)) as source:
        with pytest.raises(TokenRefused) as info:
            await source.token()
    message = str(info.value)
    assert isinstance(info.value, ConfigError)
    assert info.value.exit_code == 2
    assert "\n" not in message
    assert server.token_url in message
    assert "'hifi-test'" in message
    assert "HTTP 401 (invalid_client)" in message
    assert wrong not in message
    assert server.client_secret not in message
    assert len(server.token_requests) == 1


async def test_transient_failures_are_retried_with_backoff(server: OAuth2Server) -> None:
    """503 and 500 from the token endpoint are retried (with a wait between), then the token
    comes; four failures in a row are a TokenUnavailable."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    server.refuse(503, 500)
    async with TokenSource(_credentials(server), sleep=sleep) as source:
        assert await source.token() == server.issued[0]
    assert [r.status for r in server.token_requests] == [503, 500, 200]
    assert len(waits) == 2
    assert all(w >= 0 for w in waits)
    server.refuse(503, 503, 503, 503)
    async with TokenSource(_credentials(server), sleep=_no_sleep) as source:
        with pytest.raises(TokenUnavailable, match="answered HTTP 503"):
            await source.token()


async def test_no_answer_is_transient_and_names_the_endpoint() -> None:
    """A refused connection or a timeout at the token endpoint is a TokenUnavailable naming it."""
    url = "https://idp.test/oauth2/token"
    creds = ClientCredentials(url, "c", "s3cr3t-value", attempts=2)
    with respx.mock:
        route = respx.post(url).mock(side_effect=httpx.ConnectError("refused"))
        async with TokenSource(creds, sleep=_no_sleep) as source:
            with pytest.raises(TokenUnavailable, match=f"{url}.*no answer: ConnectError"):
                await source.token()
    assert route.call_count == 2


async def test_answer_without_a_bearer_token_is_refused() -> None:
    """A 200 that is not a token (an HTML page: a wrong token_url) or not a bearer token is a
    refusal naming the endpoint."""
    url = "https://idp.test/token"
    creds = ClientCredentials(url, "c", "s3cr3t-value")
    with respx.mock:
        respx.post(url).respond(200, text="<html>login</html>")
        async with TokenSource(creds) as source:
            with pytest.raises(TokenRefused, match="without an access_token; is token_url right"):
                await source.token()
    with respx.mock:
        respx.post(url).respond(200, json={"access_token": "mac-token-value", "token_type": "mac"})
        async with TokenSource(creds) as source:
            with pytest.raises(TokenRefused, match="type 'mac'"):
                await source.token()


async def test_failed_refresh_keeps_the_valid_token(server: OAuth2Server) -> None:
    """A refresh ahead of expiry that fails keeps the current token while it is valid, tries
    again a second later, and fails once the token has expired."""
    server.declared_expires_in = 10
    clock = Clock()
    async with TokenSource(_credentials(server), clock=clock, sleep=_no_sleep) as source:
        first = await source.token()
        clock.now += 6
        server.refuse(400)
        assert await source.token() == first
        assert await source.token() == first  # within the second: no new request
        assert len(server.token_requests) == 2
        clock.now += 5  # expired
        server.refuse(400)
        with pytest.raises(TokenRefused):
            await source.token()


async def test_secret_and_tokens_never_reach_logs_or_errors() -> None:
    """An endpoint that echoes the secret and a failed refresh's warning: the error text masks
    the secret, the log lines hold neither it nor the token, and replaced tokens are forgotten
    two rotations later."""
    url = "https://idp.test/token"
    secret = "client-secret-" + "x7Q9" * 4
    creds = ClientCredentials(url, "c", secret)
    answers = iter(
        [
            httpx.Response(200, json={"access_token": "tok-one-Ab3dEf9hJk", "expires_in": 10}),
            httpx.Response(400, json={"error": "invalid_client", "error_description": secret}),
            httpx.Response(200, json={"access_token": "tok-two-Qw7rTy2uIo", "expires_in": 10}),
            httpx.Response(200, json={"access_token": "tok-three-Zx5cVb8nM"}),
        ]
    )
    clock = Clock()
    with respx.mock, structlog.testing.capture_logs() as logs:
        respx.post(url).mock(side_effect=lambda _request: next(answers))
        async with TokenSource(creds, clock=clock) as source:
            first = await source.token()
            clock.now += 6
            assert await source.token() == first  # refused: kept, one warning logged
            clock.now += 1.5
            second = await source.token()
            third = await source.refresh(second)
    (warning,) = [line for line in logs if line["event"] == "token_refresh_failed"]
    assert secret not in warning["error"]
    assert "***" in warning["error"]
    text = repr(logs)
    assert all(value not in text for value in (secret, first, second, third))
    assert secret not in redaction.mask(f"echo {secret}")
    assert redaction.mask(f"echo {third} and {second}") == "echo *** and ***"
    assert redaction.mask(f"echo {first}") == f"echo {first}"  # two rotations ago: forgotten
