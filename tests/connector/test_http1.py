"""The connector's HTTP/1.1 transport against real loopback servers: what is written, how replies
are framed and read, and when a connection is kept, reused or closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from connector.http1 import MAX_BODY_BYTES, Http1Transport
from connector.http1.connection import Http1Connection
from devstack.destination import Reply, TestDestination
from tests.connector.loopback_http import OK, RawServer, answer, reply_then_close, until_eof
from tests.helpers import until

JSON = {"Content-Type": "application/json"}


def _client(transport: Http1Transport, **settings: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, **settings)  # type: ignore[arg-type]


async def test_requests_reuse_one_keep_alive_connection(destination: TestDestination) -> None:
    """Sequential requests to one origin share one connection; the server gets each body and
    header as sent."""
    async with _client(Http1Transport()) as client:
        for i in range(3):
            body = b'[{"id":"e%d"}]' % i
            response = await client.post(
                destination.url, content=body, headers={**JSON, "Idempotency-Key": f"k{i}"}
            )
            assert response.status_code == 200
            assert response.json() == {"accepted": 1}
    assert destination.connections_opened == 1
    assert destination.delivered_ids() == ["e0", "e1", "e2"]
    assert [r.headers["idempotency-key"] for r in destination.requests] == ["k0", "k1", "k2"]


async def test_host_and_content_length_are_written_once_as_httpx_set_them() -> None:
    """The head carries httpx's headers as they are: one Host, one Content-Length, the
    caller's names as spelled, the path with its query."""
    async with RawServer(answer([OK])) as server, _client(Http1Transport()) as client:
        url = server.url + "?a=1"
        await client.post(url, content=b"x" * 10, headers={"X-Trace": "t1"})
        await client.get(url)
    post, get = server.heads
    assert post.startswith(b"POST /v1/events?a=1 HTTP/1.1\r\n")
    assert post.lower().count(b"\r\nhost: 127.0.0.1:") == 1
    assert post.lower().count(b"\r\ncontent-length: 10\r\n") == 1
    assert b"\r\nX-Trace: t1\r\n" in post
    assert get.startswith(b"GET /v1/events?a=1 HTTP/1.1\r\n")
    assert b"content-length" not in get.lower()


async def test_a_header_value_with_a_line_break_is_refused_before_writing() -> None:
    """A CR or LF in a header value would split the head: the request is refused, unsent."""
    async with RawServer(answer([OK])) as server, _client(Http1Transport()) as client:
        with pytest.raises(httpx.LocalProtocolError):
            await client.post(server.url, content=b"x", headers={"X-Bad": "a\r\nInjected: 1"})
    assert server.heads == []


class _Writes(asyncio.Transport):
    """A transport that records what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


async def test_request_head_and_small_body_are_one_write() -> None:
    """The request line, headers and a small body leave in one `transport.write`."""
    connection = Http1Connection(("http", "h", 80, ""), MAX_BODY_BYTES)
    writes = _Writes()
    connection.connection_made(writes)
    exchange = asyncio.ensure_future(
        connection.exchange(
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n",
            b"body",
            head_only=False,
            write_timeout_s=None,
            read_timeout_s=None,
        )
    )
    await asyncio.sleep(0)
    connection.data_received(OK)
    reply = await exchange
    assert writes.writes == [b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody"]
    assert (reply.status, reply.body, reply.reusable) == (200, b"ok", True)


async def test_a_streamed_request_body_is_sent_chunked(destination: TestDestination) -> None:
    """A body given as a stream is read and sent with the chunked framing httpx announced."""

    async def parts() -> AsyncIterator[bytes]:
        yield b'[{"id":"s1"},'
        yield b'{"id":"s2"}]'

    async with _client(Http1Transport()) as client:
        response = await client.post(destination.url, content=parts(), headers=JSON)
    assert response.status_code == 200
    assert destination.delivered_ids() == ["s1", "s2"]
    assert destination.requests[0].headers["transfer-encoding"] == "chunked"


async def test_chunked_reply_is_read_whole_and_the_connection_kept() -> None:
    """A chunked reply arriving in pieces is joined; its connection serves the next request."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        while await server.read_request(reader) is not None:
            writer.write(
                b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            for piece in (b"5\r\nhello\r\n", b"6\r\n world\r\n", b"0\r\n\r\n"):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.01)  # the behaviour: the reply arrives in pieces

    async with RawServer(handle) as server, _client(Http1Transport()) as client:
        first = await client.post(server.url, content=b"a")
        second = await client.post(server.url, content=b"b")
    assert (first.status_code, first.text, second.text) == (500, "hello world", "hello world")
    assert server.opened == 1


async def test_reply_delimited_by_close_is_read_until_the_end() -> None:
    """A reply with neither Content-Length nor chunks ends when the server closes; that
    connection is not reused."""
    reply = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nbad event at 3"

    async with RawServer(reply_then_close(reply)) as server, _client(Http1Transport()) as client:
        first = await client.post(server.url, content=b"a")
        second = await client.post(server.url, content=b"b")
    assert (first.status_code, first.text, second.text) == (400, "bad event at 3", "bad event at 3")
    assert server.opened == 2


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 12\r\n\r\n", 304),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok", 202),
        (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK, 200),
    ],
    ids=["204", "304", "100-then-202", "103-then-200"],
)
async def test_replies_without_a_body_and_interim_replies(reply: bytes, status: int) -> None:
    """204 and 304 end at their head; a 1xx is skipped for the reply after it; the connection
    serves the next request."""
    async with RawServer(answer([reply])) as server, _client(Http1Transport()) as client:
        first = await client.post(server.url, content=b"a")
        second = await client.post(server.url, content=b"b")
    assert (first.status_code, second.status_code) == (status, status)
    assert first.content == (b"ok" if status in (200, 202) else b"")
    assert "link" not in first.headers
    assert server.opened == 1


async def test_head_reply_has_no_body_whatever_its_content_length() -> None:
    """A HEAD reply ends at its head (its Content-Length is the GET's); the next request on
    the same connection is read correctly."""
    head_reply = b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"
    async with RawServer(answer([head_reply, OK])) as server, _client(Http1Transport()) as client:
        head = await client.head(server.url)
        post = await client.post(server.url, content=b"a")
    assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", "1234")
    assert (post.status_code, post.content) == (200, b"ok")
    assert server.opened == 1


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ],
    ids=["connection-close", "http-1.0"],
)
async def test_connection_close_and_http_1_0_are_not_reused(reply: bytes) -> None:
    """`Connection: close`, or HTTP/1.0 without keep-alive: the next request opens a new
    connection, even though the server left this one open."""
    async with RawServer(answer([reply])) as server, _client(Http1Transport()) as client:
        for _ in range(2):
            assert (await client.post(server.url, content=b"a")).status_code == 200
    assert server.opened == 2


async def test_a_long_reply_body_is_cut_and_its_connection_closed() -> None:
    """Only the first MAX_BODY_BYTES of a reply are kept; the rest is not read: the connection
    is closed and the next request opens another."""
    size = 3 * MAX_BODY_BYTES
    reply = b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: %d\r\n\r\n" % size
    body = b"e" * size

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        while await server.read_request(reader) is not None:
            writer.write(reply + body)
            await writer.drain()

    async with RawServer(handle) as server, _client(Http1Transport()) as client:
        first = await client.post(server.url, content=b"a")
        second = await client.post(server.url, content=b"b")
    assert first.status_code == 413
    assert len(first.content) == len(second.content) == MAX_BODY_BYTES
    assert server.opened == 2


async def test_a_reply_before_the_whole_request_was_taken_retires_the_connection() -> None:
    """A server that answers (413) without reading a large body: the reply is returned, and
    the connection, still holding unsent bytes, is not reused."""

    async def early(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        server.heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        if len(server.heads) == 1:
            await asyncio.sleep(30)  # reads nothing more
        await until_eof(reader)

    async with RawServer(early) as server, _client(Http1Transport()) as client:
        first = await client.post(server.url, content=b"x" * (32 * 1024 * 1024))
        second = await client.post(server.url, content=b"x")
    assert (first.status_code, second.status_code, server.opened) == (413, 413, 2)


async def test_idle_connection_closed_by_the_server_is_not_reused() -> None:
    """A server that closes a keep-alive connection while it is idle: the next request goes
    out on a new connection, without an error."""

    async def close_soon() -> None:
        await asyncio.sleep(0.05)  # the behaviour: the server closes it once it lies idle

    async with (
        RawServer(answer([OK], then=close_soon)) as server,
        _client(Http1Transport()) as client,
    ):
        await client.post(server.url, content=b"a")
        assert await until(lambda: server.open_now == 0, 30, interval_s=0.01)
        assert (await client.post(server.url, content=b"b")).status_code == 200
    assert server.opened == 2


async def test_bytes_sent_on_an_idle_connection_retire_it() -> None:
    """A server that writes on an idle connection (a late 408, say) is out of step: that
    connection is closed and the next request opens a new one."""

    late = asyncio.Event()

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        await server.read_request(reader)
        writer.write(OK)
        await asyncio.sleep(0.05)  # the behaviour: the 408 comes once the connection is idle
        writer.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        late.set()
        await until_eof(reader)

    async with RawServer(handle) as server, _client(Http1Transport()) as client:
        await client.post(server.url, content=b"a")
        await asyncio.wait_for(late.wait(), 30)
        second = await client.post(server.url, content=b"b")
    assert (second.status_code, server.opened) == (200, 2)


async def _answer_each(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
) -> None:
    """200 to every request of the connection, kept open until the client closes it."""
    while await server.read_request(reader) is not None:
        writer.write(OK)


async def test_idle_connections_past_keepalive_expiry_are_closed_not_reused() -> None:
    """An idle connection older than `keepalive_expiry` is closed when next met; a new one
    serves the request."""
    limits = httpx.Limits(keepalive_expiry=0.3)

    async with RawServer(_answer_each) as server, _client(Http1Transport(limits=limits)) as client:
        await client.post(server.url, content=b"a")
        await client.post(server.url, content=b"b")
        assert server.opened == 1
        await asyncio.sleep(0.6)  # the behaviour: the connection lies idle past the 0.3 s expiry
        await client.post(server.url, content=b"c")
        assert await until(lambda: server.eofs == 1, 30, interval_s=0.01)
        assert (server.opened, server.eofs) == (2, 1)


async def test_a_pool_at_rest_closes_its_idle_connections_past_keepalive_expiry() -> None:
    """With no request to meet them, idle connections past `keepalive_expiry` are closed all
    the same: a connector at rest does not hold its sockets open."""
    limits = httpx.Limits(keepalive_expiry=0.2)

    async with RawServer(_answer_each) as server, _client(Http1Transport(limits=limits)) as client:
        await asyncio.gather(*(client.post(server.url, content=b"a") for _ in range(2)))
        assert server.opened == 2
        assert await until(lambda: server.eofs == 2, 30, interval_s=0.01)


async def test_never_more_connections_than_max_connections(destination: TestDestination) -> None:
    """Twelve requests at once with max_connections 3: never more than 3 sockets at once,
    the others wait for a free connection, all are answered."""
    transport = Http1Transport(limits=httpx.Limits(max_connections=3))
    seen: list[int] = []
    destination.script(*[Reply(200, delay_s=0.05)] * 12)

    async def one(i: int) -> int:
        response = await client.post(destination.url, content=b'[{"id":"e%d"}]' % i, headers=JSON)
        seen.append(transport.open_connections)
        return response.status_code

    async with _client(transport) as client:
        statuses = await asyncio.gather(*(one(i) for i in range(12)))
    assert statuses == [200] * 12
    assert destination.connections_opened == 3
    assert max(seen) <= 3
    assert sorted(destination.delivered_ids()) == sorted(f"e{i}" for i in range(12))


async def test_waiting_request_times_out_with_pool_timeout(destination: TestDestination) -> None:
    """With the only connection busy, a request waits `pool` seconds, then PoolTimeout; the
    busy one still completes."""
    transport = Http1Transport(limits=httpx.Limits(max_connections=1))
    destination.script(Reply(200, delay_s=0.5))
    timeout = httpx.Timeout(5.0, pool=0.1)
    async with _client(transport, timeout=timeout) as client:
        busy = asyncio.ensure_future(client.post(destination.url, content=b"[]", headers=JSON))
        assert await until(lambda: transport.open_connections == 1, 30, interval_s=0.01)
        with pytest.raises(httpx.PoolTimeout):
            await client.post(destination.url, content=b"[]", headers=JSON)
        assert (await busy).status_code == 200
        assert (await client.post(destination.url, content=b"[]", headers=JSON)).status_code == 200
    assert destination.connections_opened == 1


async def test_full_pool_closes_an_idle_connection_of_another_origin() -> None:
    """At max_connections, a request to another origin closes an idle connection to free its
    slot instead of waiting."""
    transport = Http1Transport(limits=httpx.Limits(max_connections=1))

    async with (
        RawServer(_answer_each) as one,
        RawServer(_answer_each) as other,
        _client(transport) as client,
    ):
        await client.post(one.url, content=b"a")
        await client.post(other.url, content=b"b")
        assert await until(lambda: one.eofs == 1, 30, interval_s=0.01)
        assert (one.eofs, transport.open_connections) == (1, 1)


async def test_aclose_closes_every_connection() -> None:
    """Closing the client closes each pooled connection: the server sees each one end."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        while await server.read_request(reader) is not None:
            await asyncio.sleep(0.05)  # the behaviour: a slow reply, so the three overlap
            writer.write(OK)

    transport = Http1Transport()
    async with RawServer(handle) as server:
        async with _client(transport) as client:
            await asyncio.gather(*(client.post(server.url, content=b"a") for _ in range(3)))
            assert transport.open_connections == 3
        assert transport.open_connections == 0
        assert await until(lambda: server.eofs == 3, 30, interval_s=0.01)
