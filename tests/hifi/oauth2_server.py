"""A real OAuth2 token endpoint and a bearer-checking destination on loopback, for the tests of
`hifi.oauth2` and the connector's `[auth]`."""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class TokenRequest:
    """One request to the token endpoint as it was read."""

    form: dict[str, str]
    authorization: str | None
    status: int


@dataclass
class OAuth2Server:
    """`/token` issues tokens by the client-credentials grant; `/events` accepts JSON batches
    carrying a valid one (401 otherwise) and records their ids.

    Tokens live `lifetime_s` (None: for ever) and are announced with `expires_in` =
    `declared_expires_in` (None: left out). `refuse(status, ...)` scripts the next answers of
    `/token`; `delay_s` holds each token answer that long (callers overlap).
    """

    client_id: str = "hifi-test"
    client_secret: str = field(default_factory=lambda: "cs-" + secrets.token_urlsafe(18))
    lifetime_s: float | None = 3600.0
    declared_expires_in: float | None = 3600.0
    delay_s: float = 0.0
    token_requests: list[TokenRequest] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    delivered_ids: list[str] = field(default_factory=list)
    unauthorized: int = 0  # /events requests answered 401
    _expiry: dict[str, float] = field(default_factory=dict)
    _refusals: deque[int] = field(default_factory=deque)
    _runner: web.AppRunner | None = None
    port: int = 0

    def refuse(self, *statuses: int) -> None:
        """Answer the next token requests with these statuses (then issue tokens again)."""
        self._refusals.extend(statuses)

    def valid(self, token: str) -> bool:
        expiry = self._expiry.get(token)
        return expiry is not None and time.monotonic() < expiry

    def revoke_all(self) -> None:
        """Every token issued so far is refused from now on."""
        self._expiry.clear()

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    async def __aenter__(self) -> OAuth2Server:
        app = web.Application()
        app.router.add_post("/token", self._token)
        app.router.add_post("/events", self._events)
        app.router.add_route("HEAD", "/events", self._head)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _client_of(
        self, request_form: dict[str, str], authorization: str | None
    ) -> tuple[str, str]:
        if authorization and authorization.startswith("Basic "):
            user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
            return user, password
        return request_form.get("client_id", ""), request_form.get("client_secret", "")

    async def _token(self, request: web.Request) -> web.Response:
        form = {key: str(value) for key, value in (await request.post()).items()}
        authorization = request.headers.get("Authorization")
        if self._refusals:
            status = self._refusals.popleft()
            self.token_requests.append(TokenRequest(form, authorization, status))
            body = {"error": "invalid_client", "error_description": "refused by the script"}
            return web.json_response(body, status=status)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        good = form.get("grant_type") == "client_credentials" and self._client_of(
            form, authorization
        ) == (self.client_id, self.client_secret)
        status = 200 if good else 401
        self.token_requests.append(TokenRequest(form, authorization, status))
        if not good:
            return web.json_response({"error": "invalid_client"}, status=401)
        token = "at-" + secrets.token_urlsafe(24)
        self.issued.append(token)
        lifetime = float("inf") if self.lifetime_s is None else self.lifetime_s
        self._expiry[token] = time.monotonic() + lifetime
        answer: dict[str, Any] = {"access_token": token, "token_type": "Bearer"}
        if self.declared_expires_in is not None:
            answer["expires_in"] = self.declared_expires_in
        return web.json_response(answer)

    async def _head(self, request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return web.Response(status=200 if self.valid(token) else 401)

    async def _events(self, request: web.Request) -> web.Response:
        authorization = request.headers.get("Authorization", "")
        token = authorization.removeprefix("Bearer ")
        if not authorization.startswith("Bearer ") or not self.valid(token):
            self.unauthorized += 1
            # a careless server echoes the refused credential
            return web.json_response({"error": "invalid_token", "echo": authorization}, status=401)
        events = orjson.loads(await request.read())
        self.delivered_ids.extend(str(event["id"]) for event in events)
        return web.json_response({"accepted": len(events)})
