"""A webhook receiver as its users write one: each request's Standard Webhooks signature checked
with the `standardwebhooks` package, each event kept once by its `webhook-id`.

An event can ask it to misbehave: `"lose": true` is kept and then answered 503 on its first
request (a reply lost on the way back, so the sender sends it again); `"reject": true` is
answered 422 while `rejecting` is set.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import standardwebhooks
from aiohttp import web


@dataclass
class Receiver:
    secret: str
    rejecting: bool = True
    url: str = ""
    kept: dict[str, Any] = field(default_factory=dict)  # webhook-id -> the event, once
    requests: Counter[str] = field(default_factory=Counter)  # webhook-id -> requests
    rejected: dict[str, str] = field(default_factory=dict)  # webhook-id -> the 422's timestamp
    refused: list[str] = field(default_factory=list)  # why a signature did not verify

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = dict(request.headers)
        try:
            event = standardwebhooks.Webhook(self.secret).verify(body, headers)
        except (standardwebhooks.WebhookVerificationError, ValueError) as exc:
            self.refused.append(str(exc))
            return web.Response(status=401)
        msg_id = request.headers["webhook-id"]
        self.requests[msg_id] += 1
        if event.get("reject") and self.rejecting:
            self.rejected[msg_id] = request.headers["webhook-timestamp"]
            return web.Response(status=422, text="rejected for now")
        first = msg_id not in self.kept
        self.kept.setdefault(msg_id, event)
        if event.get("lose") and first:
            return web.Response(status=503)
        return web.Response(status=204)


@contextlib.asynccontextmanager
async def receiving(secret: str) -> AsyncIterator[Receiver]:
    """A `Receiver` serving POST / on a loopback port of its own."""
    receiver = Receiver(secret)
    app = web.Application()
    app.router.add_post("/", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://127.0.0.1:{port}/"
    try:
        yield receiver
    finally:
        await runner.cleanup()
