"""The connector's HTTP/1.1 transport when things fail, against real loopback servers: timeouts,
refusals, broken replies and TLS, each as the httpx exception the connector counts."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from connector.http1 import Http1Transport
from connector.http1.connection import HEADER_BYTES_MAX
from connector.reply_policy import Unreachable, no_reply
from devstack.destination import Reply, TestDestination
from hifi.errors import DestinationUnavailable
from tests.connector.loopback_http import OK, RawServer, answer, reply_then_close, until_eof
from tests.helpers import make_destination

JSON = {"Content-Type": "application/json"}


def _client(transport: Http1Transport | None = None, **settings: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport or Http1Transport(), **settings)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound by this process but not listening: connections are refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


async def test_refused_connection_is_connect_error_with_its_cause(closed_port: int) -> None:
    """Nobody listening: ConnectError, the OSError as its cause, the request attached."""
    async with _client() as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post(f"http://127.0.0.1:{closed_port}/v1", content=b"[]")
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)
    assert caught.value.request.url.port == closed_port


async def test_name_not_resolved_is_connect_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DNS failure (the resolver's gaierror) is a ConnectError with it as the cause."""
    loop = asyncio.get_running_loop()

    async def no_such_name(*args: object, **kwargs: object) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(loop, "getaddrinfo", no_such_name)
    async with _client() as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post("http://destination.invalid/v1", content=b"[]")
    assert isinstance(caught.value.__cause__, socket.gaierror)


async def test_no_tls_handshake_in_time_is_connect_timeout() -> None:
    """A server that accepts TCP but never answers the TLS handshake: ConnectTimeout after
    `connect` seconds."""

    async def silent(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        await until_eof(reader)

    async with RawServer(silent) as server:
        url = f"https://127.0.0.1:{server.port}/v1"
        async with _client(timeout=httpx.Timeout(5.0, connect=0.2)) as client:
            with pytest.raises(httpx.ConnectTimeout):
                await client.post(url, content=b"[]")


async def test_no_reply_in_time_is_read_timeout(destination: TestDestination) -> None:
    """No response byte within `read` seconds: ReadTimeout, and the connection is dropped."""
    destination.script(Reply(200, delay_s=1.0))
    async with _client(timeout=httpx.Timeout(5.0, read=0.2)) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(destination.url, content=b"[]", headers=JSON)
        assert (await client.post(destination.url, content=b"[]", headers=JSON)).status_code == 200
    assert destination.connections_opened == 2


async def test_read_timeout_bounds_each_wait_not_the_whole_reply() -> None:
    """A reply trickling in chunks, each sooner than `read` seconds, is read to its end
    although it takes longer than `read` in all."""

    async def trickle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(6):
            await asyncio.sleep(0.1)  # the behaviour: a chunk every 0.1 s, each within `read`
            writer.write(b"1\r\nx\r\n")
        writer.write(b"0\r\n\r\n")
        await until_eof(reader)

    async with (
        RawServer(trickle) as server,
        _client(timeout=httpx.Timeout(5.0, read=0.5)) as client,
    ):
        response = await client.post(server.url, content=b"a")
    assert response.text == "xxxxxx"


async def test_request_not_taken_in_time_is_write_timeout() -> None:
    """A server that reads nothing: a body larger than the socket buffers cannot be written,
    WriteTimeout after `write` seconds."""

    async def deaf(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        await asyncio.sleep(30)  # the behaviour: reads nothing

    async with RawServer(deaf) as server, _client(timeout=httpx.Timeout(5.0, write=0.2)) as client:
        with pytest.raises(httpx.WriteTimeout):
            await client.post(server.url, content=b"x" * (64 * 1024 * 1024))


async def test_connection_dropped_without_reply_is_not_retried(
    destination: TestDestination,
) -> None:
    """The server reads the POST and closes without answering: RemoteProtocolError, the POST
    is not sent again, the next request opens a new connection."""
    destination.script(Reply(drop=True))
    async with _client() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post(destination.url, content=b'[{"id":"e1"}]', headers=JSON)
        assert destination.request_count == 1
        await client.post(destination.url, content=b'[{"id":"e2"}]', headers=JSON)
    assert destination.delivered_ids() == ["e2"]
    assert destination.connections_opened == 2


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 503 Busy\r\nContent-Length: 100\r\n\r\nonly this",
        b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 500 Oops\r\nContent-Le",
        b"HTTP/1.1 20",
    ],
    ids=["short-body", "unfinished-chunks", "unfinished-head", "unfinished-status-line"],
)
async def test_connection_closed_mid_reply_is_remote_protocol_error(reply: bytes) -> None:
    """A reply that is not a 2xx, cut short by the server closing: RemoteProtocolError, never
    a short body; nor is a status line cut before its end read as one."""

    async with RawServer(reply_then_close(reply)) as server, _client() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post(server.url, content=b"a")


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"HTTP/1.1 200\r\nContent-Length: 2, 2\r\n\r\nok",
    ],
    ids=["short-body", "unfinished-chunks", "unfinished-head", "repeated-length"],
)
async def test_a_2xx_status_line_is_the_reply_whatever_follows(reply: bytes) -> None:
    """The destination said 2xx: that is its answer, even when the rest is cut short or its
    framing is ambiguous; the connection is not reused."""
    async with RawServer(reply_then_close(reply)) as server, _client() as client:
        response = await client.post(server.url, content=b"a")
        assert response.status_code == 200
        assert response.extensions["hifi.anomalies"]
        await client.post(server.url, content=b"b")
    assert len(server.heads) == 2


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 101 Switching\r\nUpgrade: x\r\n\r\n",
    ],
    ids=["bad-status", "not-http", "upgrade"],
)
async def test_malformed_reply_is_remote_protocol_error_and_drops_the_connection(
    reply: bytes,
) -> None:
    """A reply llhttp cannot parse (or a protocol switch): RemoteProtocolError; the connection
    is closed and the next request opens another."""
    async with RawServer(answer([reply, OK])) as server, _client() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post(server.url, content=b"a")
        assert (await client.post(server.url, content=b"b")).status_code == 200
    assert server.opened == 2


async def test_reply_headers_past_the_bound_are_remote_protocol_error() -> None:
    """A reply whose headers run past `HEADER_BYTES_MAX` is refused, not held in memory; after
    a 2xx status line it is the destination's yes all the same, and its connection is closed."""
    huge = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"v" * 1000) for i in range(80))
    refused = b"HTTP/1.1 500 Oops\r\n" + huge + b"Content-Length: 0\r\n\r\n"
    accepted = b"HTTP/1.1 200 OK\r\n" + huge + b"Content-Length: 0\r\n\r\n"
    assert len(huge) > HEADER_BYTES_MAX
    async with RawServer(answer([refused, accepted, OK])) as server, _client() as client:
        with pytest.raises(httpx.RemoteProtocolError, match="headers over"):
            await client.post(server.url, content=b"a")
        response = await client.post(server.url, content=b"b")
        assert response.status_code == 200
        assert response.extensions["hifi.anomalies"] == ("headers_too_large",)
        assert (await client.post(server.url, content=b"c")).status_code == 200
    assert server.opened == 3


async def test_a_body_its_encoding_does_not_decode_is_kept_as_sent() -> None:
    """`Content-Encoding: gzip` over bytes that are not gzip: the reply is still a reply (its
    status decides), its body the bytes sent; not an error that would stop the connector."""
    body = b"not gzip at all"
    reply = (
        b"HTTP/1.1 500 Oops\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
    )
    async with RawServer(answer([reply])) as server, _client() as client:
        response = await client.post(server.url, content=b"a")
    assert (response.status_code, response.content) == (500, body)


# --- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_context(ca: trustme.CA, *hosts: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*hosts).configure_cert(context)
    return context


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_tls_with_the_given_context_and_keep_alive(ca: trustme.CA) -> None:
    """HTTPS with the context given (a private CA): replies read, the connection kept."""
    server_context, trusting = _server_context(ca, "127.0.0.1"), _trusting(ca)
    async with (
        TestDestination(ssl_context=server_context) as server,
        _client(Http1Transport(ssl_context=trusting)) as client,
    ):
        for i in range(2):
            body = b'[{"id":"e%d"}]' % i
            assert (await client.post(server.url, content=body, headers=JSON)).is_success
    assert (server.delivered_ids(), server.connections_opened) == (["e0", "e1"], 1)


async def test_untrusted_certificate_is_connect_error(ca: trustme.CA) -> None:
    """httpx's default context does not trust a private CA: ConnectError, the certificate
    error as its cause, nothing sent."""
    async with (
        TestDestination(ssl_context=_server_context(ca, "127.0.0.1")) as server,
        _client(Http1Transport()) as client,
    ):
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post(server.url, content=b"[]", headers=JSON)
    assert isinstance(caught.value.__cause__, ssl.SSLCertVerificationError)
    assert server.request_count == 0


async def test_host_name_is_checked_against_sni_hostname(ca: trustme.CA) -> None:
    """A certificate for another name is refused, unless the `sni_hostname` extension names it."""
    server_context, trusting = _server_context(ca, "api.example.test"), _trusting(ca)
    async with (
        TestDestination(ssl_context=server_context) as server,
        _client(Http1Transport(ssl_context=trusting)) as client,
    ):
        with pytest.raises(httpx.ConnectError):
            await client.post(server.url, content=b"[]", headers=JSON)
        named = client.build_request(
            "POST",
            server.url,
            content=b"[]",
            headers=JSON,
            extensions={"sni_hostname": "api.example.test"},
        )
        assert (await client.send(named)).is_success


# --- what the connector makes of them -------------------------------------------------------


async def test_deliverer_counts_only_connect_errors_as_unreachable(
    catalog_dir: Path, destination: TestDestination, closed_port: int, unique: str
) -> None:
    """A refused connection is `Unreachable` (no request reached the destination); a dropped
    reply is unavailable but not unreachable."""
    dest = make_destination(catalog_dir, unique, destination.url, "src")
    async with _client() as client:
        with pytest.raises(httpx.ConnectError) as refused:
            await client.post(f"http://127.0.0.1:{closed_port}/v1", content=b"[]")
        destination.script(Reply(drop=True))
        with pytest.raises(httpx.RemoteProtocolError) as dropped:
            await client.post(destination.url, content=b"[]", headers=JSON)
    _, unreachable = no_reply(refused.value, dest.request_timeout_s)
    assert isinstance(unreachable, Unreachable)
    assert "ConnectionRefusedError" in str(unreachable)
    _, unavailable = no_reply(dropped.value, dest.request_timeout_s)
    assert isinstance(unavailable, DestinationUnavailable)
    assert not isinstance(unavailable, Unreachable)
