"""The transport at the edge with the real web: redirects, replies read within bounds, lenient
parsing, keep-alive peers that close, and a tenant's addresses, against loopback servers that
behave as unusual or hostile destinations do."""

from __future__ import annotations

import asyncio
import gzip
import resource
import time

import httpx
import pytest

from connector.http1 import Http1Transport
from connector.http1.addresses import ForbiddenAddress
from connector.http1.decoding import DECODED_MAX_BYTES
from tests.connector.loopback_http import OK, RawServer, answer

SECRETS = {"X-Api-Key": "k-123456789", "Authorization": "Bearer t-123456789"}
BODY = b'[{"id":"e1"}]'


def _client(transport: Http1Transport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, timeout=5.0)


def _redirect(status: int, location: bytes) -> bytes:
    return b"HTTP/1.1 %d Moved\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % (status, location)


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_301_302_or_303_to_a_post_is_never_followed(status: int) -> None:
    """Following one turns the POST into a GET without a body, whose 2xx would count the
    events delivered: the 3xx is the reply, and nothing else is sent."""
    transport = Http1Transport(follow_redirects=True)
    async with (
        RawServer(answer([_redirect(status, b"/elsewhere"), OK])) as server,
        _client(transport) as client,
    ):
        response = await client.post(server.url, content=BODY)
    assert response.status_code == status
    assert len(server.heads) == 1
    assert server.heads[0].startswith(b"POST /v1/events ")


@pytest.mark.parametrize("status", [307, 308])
async def test_a_307_or_308_is_followed_with_its_method_and_body(status: int) -> None:
    bodies: list[bytes | None] = []

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        while (body := await server.read_request(reader)) is not None:
            bodies.append(body)
            writer.write(_redirect(status, b"/moved") if len(bodies) == 1 else OK)
            await writer.drain()

    transport = Http1Transport(follow_redirects=True)
    async with RawServer(handle) as server, _client(transport) as client:
        response = await client.post(server.url, content=BODY, headers=SECRETS)
    assert response.status_code == 200
    assert [head.split(b"\r\n")[0] for head in server.heads] == [
        b"POST /v1/events HTTP/1.1",
        b"POST /moved HTTP/1.1",
    ]
    assert bodies == [BODY, BODY]
    assert b"X-Api-Key: k-123456789" in server.heads[1]  # the same origin: its secrets too


async def test_without_follow_redirects_a_307_is_the_reply() -> None:
    transport = Http1Transport()
    async with (
        RawServer(answer([_redirect(307, b"/moved"), OK])) as server,
        _client(transport) as client,
    ):
        response = await client.post(server.url, content=BODY)
    assert response.status_code == 307
    assert len(server.heads) == 1


async def test_at_most_three_hops_then_the_redirect_is_the_reply() -> None:
    transport = Http1Transport(follow_redirects=True)
    async with (
        RawServer(answer([_redirect(307, b"/again")])) as server,
        _client(transport) as client,
    ):
        response = await client.post(server.url, content=BODY)
    assert response.status_code == 307
    assert len(server.heads) == 4  # the request and three hops


async def test_a_hop_to_another_origin_carries_no_secret_unless_trusted() -> None:
    """A 307 to another port: `[headers]` values and the Authorization stay behind, what
    describes the body goes along; an origin in `trusted_origins` gets everything."""
    async with RawServer(answer([OK])) as other:
        target = f"http://127.0.0.1:{other.port}/in".encode()
        async with RawServer(answer([_redirect(307, target)])) as first:
            async with _client(Http1Transport(follow_redirects=True)) as client:
                headers = {**SECRETS, "Idempotency-Key": "b-1", "Content-Type": "application/json"}
                assert (
                    await client.post(first.url, content=BODY, headers=headers)
                ).status_code == 200
            trusted = frozenset({f"http://127.0.0.1:{other.port}"})
            transport = Http1Transport(follow_redirects=True, trusted_origins=trusted)
            async with _client(transport) as client:
                await client.post(first.url, content=BODY, headers=SECRETS)
        port = other.port
    bare, kept = other.heads
    assert b"k-123456789" not in bare
    assert b"t-123456789" not in bare
    assert b"Idempotency-Key: b-1" in bare
    assert b"Content-Type: application/json" in bare
    assert f"Host: 127.0.0.1:{port}".encode() in bare
    assert b"X-Api-Key: k-123456789" in kept
    assert b"Authorization: Bearer t-123456789" in kept


async def test_a_redirect_with_an_unreadable_location_is_the_reply() -> None:
    reply = b"HTTP/1.1 307 Moved\r\nLocation: /\xc2\xb2 x\r\nContent-Length: 0\r\n\r\n"
    transport = Http1Transport(follow_redirects=True)
    async with RawServer(answer([reply, OK])) as server, _client(transport) as client:
        response = await client.post(server.url, content=BODY)
    assert response.status_code == 307
    assert response.extensions["hifi.anomalies"] == ("location",)


def _bomb(status: bytes) -> bytes:
    body = gzip.compress(gzip.compress(b"\0" * (64 * 1024 * 1024), 9), 9)  # 64 MiB in a few KB
    return b"HTTP/1.1 %s\r\nContent-Encoding: gzip, gzip\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


@pytest.mark.parametrize("status", [b"200 OK", b"500 Oops"])
async def test_a_compression_bomb_costs_at_most_the_cap(status: bytes) -> None:
    """A 2xx body is never decoded; an error body is decoded to `DECODED_MAX_BYTES` at most,
    in well under the time httpx takes to decode it whole (seconds, hundreds of MB)."""
    reply = _bomb(status)
    assert len(reply) < 200_000
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with RawServer(answer([reply])) as server, _client(Http1Transport()) as client:
        started = time.perf_counter()
        response = await client.post(server.url, content=BODY)
        took_s = time.perf_counter() - started
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb) / 1024
    assert len(response.content) <= max(DECODED_MAX_BYTES, len(reply))
    assert grown_mb < 32, f"RSS grew {grown_mb:.0f} MB"
    assert took_s < 1.0
    if status.startswith(b"200"):
        assert response.content.startswith(b"\x1f\x8b")  # as sent
    else:
        assert response.content == b"\0" * DECODED_MAX_BYTES


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 503 Busy\r\nX-Note: a\r\n  folded\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy",
        b"HTTP/1.1 503 Busy\nRetry-After: 7\nContent-Length: 4\n\nbusy",
    ],
    ids=["obs-fold", "bare-lf"],
)
async def test_obs_fold_and_bare_line_feeds_are_read(reply: bytes) -> None:
    """RFC 9112: a client must accept obs-fold in a response (5.2) and may read a bare LF as
    a line end (2.2): the reply is read, not refused as malformed."""
    async with RawServer(answer([reply, OK])) as server, _client(Http1Transport()) as client:
        response = await client.post(server.url, content=BODY)
        assert response.status_code == 503
        assert response.headers["retry-after"] == "7"
        assert response.content == b"busy"
        assert (await client.post(server.url, content=BODY)).status_code == 200
    assert server.opened == 1  # kept alive: it was a whole reply


def _close_after_each_reply() -> RawServer:
    """A server that closes each connection right after its reply, saying nothing of it."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        if await server.read_request(reader) is not None:
            writer.write(OK)
            await writer.drain()
            writer.close()

    return RawServer(handle)


async def test_a_peer_that_closes_after_each_reply_costs_no_failed_request() -> None:
    """The close is noticed before a connection is reused, or the request that met it is sent
    once more on a new connection: no request fails, sequential or eight at once."""
    async with _close_after_each_reply() as server, _client(Http1Transport()) as client:
        for _ in range(20):
            assert (await client.post(server.url, content=BODY)).status_code == 200
        for _ in range(10):
            replies = await asyncio.gather(
                *(client.post(server.url, content=BODY) for _ in range(8))
            )
            assert [r.status_code for r in replies] == [200] * 8
    assert len(server.heads) <= 100 + 10  # a re-sent request is rare, never a storm


async def test_a_request_that_fails_on_a_reused_connection_is_sent_once_more() -> None:
    """The second request meets a connection its server closes on reading it, before any reply
    byte: it is sent again on a new connection, once."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        while await server.read_request(reader) is not None:
            if len(server.heads) == 2:
                return  # read the request, answer nothing, close
            writer.write(OK)
            await writer.drain()

    async with RawServer(handle) as server, _client(Http1Transport()) as client:
        assert (await client.post(server.url, content=BODY)).status_code == 200
        assert (await client.post(server.url, content=BODY)).status_code == 200
    assert len(server.heads) == 3
    assert server.opened == 2


async def test_a_fresh_connection_that_fails_is_not_sent_again() -> None:
    async def drop(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        await server.read_request(reader)

    async with RawServer(drop) as server, _client(Http1Transport()) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post(server.url, content=BODY)
    assert len(server.heads) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_public_only_request_never_connects_to_a_loopback_address(host: str) -> None:
    async with RawServer(answer([OK])) as server, _client(Http1Transport()) as client:
        url = server.url.replace("127.0.0.1", host)
        with pytest.raises(ForbiddenAddress, match="loopback, link-local or private"):
            await client.post(url, content=BODY, extensions={"hifi.public_only": True})
        assert (await client.post(url, content=BODY)).status_code == 200
    assert server.opened == 1


@pytest.mark.parametrize(("status", "delivered"), [(b"200 OK", True), (b"500 Oops", False)])
async def test_a_reply_trickled_past_the_deadline_ends_there(
    status: bytes, delivered: bool
) -> None:
    """One byte every 0.1 s never trips the read timeout; `hifi.total_timeout_s` ends the
    attempt all the same, and a 2xx status line that came in time is the answer."""

    async def trickle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 %s\r\nContent-Length: 1000\r\n\r\n" % status)
        for _ in range(1000):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.1)  # the behaviour: one byte every 0.1 s

    extensions = {"hifi.total_timeout_s": 0.8}
    async with RawServer(trickle) as server, _client(Http1Transport()) as client:
        started = time.perf_counter()
        if delivered:
            response = await client.post(server.url, content=BODY, extensions=extensions)
            assert response.status_code == 200
            assert response.extensions["hifi.anomalies"] == ("slow_after_2xx",)
        else:
            with pytest.raises(httpx.ReadTimeout, match="deadline"):
                await client.post(server.url, content=BODY, extensions=extensions)
        took_s = time.perf_counter() - started
    assert 0.7 < took_s < 1.5
