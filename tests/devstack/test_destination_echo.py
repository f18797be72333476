"""The test destination's `Echo`: error replies that echo the request's credentials back."""

from __future__ import annotations

import httpx
import orjson

from devstack.destination import Echo, Reply, TestDestination

TOKEN = "abc/def+ghi"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _post(dest: TestDestination) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(dest.url, content=b'[{"id": "a"}]', headers=AUTH)


async def test_error_replies_echo_the_authorization_value_in_body_and_header() -> None:
    async with TestDestination() as dest:
        dest.echo(Echo())
        dest.script(Reply(401), Reply(200))
        rejected, accepted = await _post(dest), await _post(dest)
    assert rejected.status_code == 401
    assert rejected.content == b'{"error":"401: scripted reply","echo":"Bearer abc\\/def+ghi"}'
    assert orjson.loads(rejected.content)["echo"] == f"Bearer {TOKEN}"
    assert TOKEN in rejected.headers["www-authenticate"]
    assert "location" not in rejected.headers
    assert accepted.json() == {"accepted": 1}
    assert "www-authenticate" not in accepted.headers


async def test_token_only_redirect_echoes_in_location_percent_encoded() -> None:
    async with TestDestination() as dest:
        dest.echo(Echo(token_only=True))
        dest.script(Reply(302))
        response = await _post(dest)
    assert response.status_code == 302
    assert response.headers["location"] == "/login?token=abc%2Fdef%2Bghi"
    assert orjson.loads(response.content)["echo"] == TOKEN


async def test_text_in_a_raw_body_and_echo_stopped() -> None:
    async with TestDestination() as dest:
        dest.echo(Echo(text="ends with abc/d", raw_body=True))
        dest.script(Reply(503), Reply(503))
        echoed = await _post(dest)
        dest.echo(None)
        plain = await _post(dest)
    assert echoed.text == "ends with abc/d"
    assert echoed.headers["content-type"].startswith("text/plain")
    assert plain.json() == {"error": "503: scripted reply"}
    assert "www-authenticate" not in plain.headers
