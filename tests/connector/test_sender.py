"""`connector.sender`: the request the connector's own path writes is the one httpx wrote before
it, a route is prepared once, and the answer is read as the policy reads it."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from config.destination import Destination
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.http1 import Http1Transport
from connector.http1.decoding import Answer
from connector.http_client import http_client
from connector.rebatch import Batch
from connector.sender import (
    MAX_TENANT_ROUTES,
    Http1Sender,
    HttpxSender,
    Route,
    Routes,
    Sender,
    opened_sender,
)
from tests.connector.loopback_http import RawServer, answer
from tests.helpers import FakeKafka, Sleeps, make_destination, make_event

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
_HEADERS = {"Content-Type": "application/json", "X-Api-Key": "k-1", "user-agent": "mine/1"}
_EXTRA = [("Idempotency-Key", "0123456789abcdef"), ("Authorization", "Bearer t-1")]


def _fields(head: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """A request head's line and its fields, names in lower case."""
    line, *lines = head.rstrip(b"\r\n").split(b"\r\n")
    pairs = [entry.split(b": ", 1) for entry in lines]
    assert len({name.lower() for name, _ in pairs}) == len(pairs), head  # none twice
    return line, {name.lower(): value for name, value in pairs}


def _destination(tmp_path: Path, url: str) -> Destination:
    return make_destination(tmp_path, "d", url, "t", request_timeout_s=5.0)


async def _head_sent(
    sender: Sender, url: str, server: RawServer, body: bytes, extra: list[tuple[str, str]]
) -> bytes:
    found = await sender.post(Route.of(url, _HEADERS), body, extra)
    assert found.status == 200
    return server.heads[-1]


@pytest.mark.parametrize("userinfo", ["", "user:p%40ss@"])
async def test_the_direct_path_writes_the_request_httpx_wrote(
    tmp_path: Path, userinfo: str
) -> None:
    """The same route and request through httpx's client and through `Http1Sender`: the same
    request line and the same header fields (the route's, httpx's defaults it does not
    override, Host, Content-Length, the request's own)."""
    body = b'[{"id":"e1"}]'
    async with RawServer(answer([_OK])) as server:
        port = server.port
        url = server.url.replace("http://", f"http://{userinfo}")
        extra = _EXTRA[:1] if userinfo else _EXTRA  # httpx's URL credentials beat a Bearer
        dest = _destination(tmp_path, url)
        async with http_client(dest) as client:
            before = await _head_sent(HttpxSender(client, timeout_s=5.0), url, server, body, extra)
        async with opened_sender(dest) as sender:
            assert isinstance(sender, Http1Sender)
            now = await _head_sent(sender, url, server, body, extra)
    assert _fields(now) == _fields(before)
    line, fields = _fields(now)
    assert line == b"POST /v1/events HTTP/1.1"
    assert fields[b"user-agent"] == b"mine/1"  # the route's, in any case, replaces the default
    assert fields[b"content-length"] == str(len(body)).encode()
    assert fields[b"host"] == f"127.0.0.1:{port}".encode()
    basic = b"Basic dXNlcjpwQHNz"  # "user:p@ss"
    assert fields[b"authorization"] == (basic if userinfo else b"Bearer t-1")
    assert fields[b"accept-encoding"] == b"gzip, deflate"


def test_a_route_is_read_once_and_refuses_what_is_not_http() -> None:
    route = Route.of("https://example.com:443/in?x=1", {"X-K": "v"}, public_only=True)
    assert route.origin == ("https", "example.com", 443)
    assert route.public_only
    assert (b"Host", b"example.com") in route.raw
    assert not any(name.lower() == b"content-length" for name, _ in route.raw)
    with pytest.raises(httpx.UnsupportedProtocol):
        Route.of("ftp://example.com/in", {})


@dataclass(eq=False)
class _Tenant:
    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


def test_routes_are_prepared_once_per_target_and_carry_the_body_headers(tmp_path: Path) -> None:
    dest = make_destination(tmp_path, "d", "http://127.0.0.1:9/in", "t", compression="gzip")
    routes = Routes(dest)
    own = routes.of(None)
    assert routes.of(None) is own
    assert own.given["Content-Type"] == "application/json"
    assert own.given["Content-Encoding"] == "gzip"
    assert not own.public_only
    tenant = _Tenant("a", "http://127.0.0.1:9/a", {"X-Tenant": "a"})
    first = routes.of(tenant)
    assert routes.of(tenant) is first
    assert first.public_only  # a tenant's URL reaches public addresses only, by default
    assert first.given["X-Tenant"] == "a"
    changed = _Tenant("a", "http://127.0.0.1:9/a2")  # a changed entry is a new route
    assert routes.of(changed).url.path == "/a2"


def test_tenant_routes_kept_are_bounded(tmp_path: Path) -> None:
    routes = Routes(make_destination(tmp_path, "d", "http://127.0.0.1:9/in", "t"))
    tenants = [_Tenant(f"t{n}", f"http://127.0.0.1:9/{n}") for n in range(MAX_TENANT_ROUTES + 5)]
    first = routes.of(tenants[0])
    for tenant in tenants[1:]:
        routes.of(tenant)
    assert len(routes._tenants) == MAX_TENANT_ROUTES
    assert routes.of(tenants[0]) is not first  # the oldest went first, prepared again
    assert routes.of(tenants[-1]) is routes.of(tenants[-1])


async def test_an_error_answer_is_decoded_within_bounds_and_a_2xx_is_not() -> None:
    packed = gzip.compress(b"quota exceeded")
    error = (
        b"HTTP/1.1 429 \r\nContent-Encoding: gzip\r\nRetry-After: 3\r\nContent-Length: %d\r\n\r\n"
    )
    accepted = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
    replies = [error % len(packed) + packed, accepted % len(packed) + packed]
    async with RawServer(answer(replies)) as server:
        transport = Http1Transport()
        try:
            sender = Http1Sender(transport, timeout_s=5.0)
            route = Route.of(server.url, {})
            refused = await sender.post(route, b"[]", ())
            taken = await sender.post(route, b"[]", ())
        finally:
            await transport.aclose()
    assert (refused.status, refused.reason, refused.body) == (
        429,
        "Too Many Requests",
        b"quota exceeded",
    )
    assert refused.header(b"retry-after") == b"3"
    assert refused.header(b"content-encoding") == b"gzip"  # as sent
    assert taken.body == packed  # a 2xx body is never decoded


def test_an_httpx_response_reads_as_the_same_answer() -> None:
    response = httpx.Response(
        503,
        headers=[("Retry-After", "7")],
        content=b"busy",
        extensions={"hifi.anomalies": ("location",)},
    )
    found = Answer.of_response(response)
    assert (found.status, found.reason, found.body) == (503, "Service Unavailable", b"busy")
    assert found.header(b"retry-after") == b"7"
    assert found.header(b"location") is None
    assert found.anomalies == ("location",)


def test_credentials_in_the_url_are_sent_as_httpx_sent_them_and_own_headers_once() -> None:
    route = Route.of(
        "http://us%20er:p%40ss@127.0.0.1:9/in", {"idempotency-key": "catalog", "X-K": "v"}
    )
    fields = {name.lower(): value for name, value in route.raw}
    assert fields[b"authorization"] == b"Basic dXMgZXI6cEBzcw=="  # "us er:p@ss"
    assert b"idempotency-key" not in fields  # each request writes its own
    named = Route.of("http://u:p@127.0.0.1:9/in", {"Authorization": "Bearer t"})
    assert (b"Authorization", b"Bearer t") in named.raw  # the headers' own wins


async def test_the_requests_own_authorization_replaces_the_urls() -> None:
    """With `[auth]` on a URL with credentials, the bearer token goes, not the URL's Basic."""
    async with RawServer(answer([_OK])) as server:
        transport = Http1Transport()
        try:
            url = server.url.replace("http://", "http://user:pw@")
            sent = await Http1Sender(transport, timeout_s=5.0).post(
                Route.of(url, {}), b"[]", [("Authorization", "Bearer t-2")]
            )
        finally:
            await transport.aclose()
    assert sent.status == 200
    assert _fields(server.heads[-1])[1][b"authorization"] == b"Bearer t-2"


class _NonAsciiToken:
    """An OAuth2 server's token that is not ASCII: no header can carry it."""

    async def token(self) -> str:
        return "tök-1"

    async def refresh(self, stale: str) -> str:
        return "tök-2"


async def test_a_request_that_cannot_be_written_is_handed_off_not_a_crash(tmp_path: Path) -> None:
    async with RawServer(answer([_OK])) as server:
        dest = _destination(tmp_path, server.url)
        kafka = FakeKafka()
        async with opened_sender(dest) as sender:
            deliverer = Deliverer(
                sender,
                dest,
                Diverter(kafka, dest),
                sleep=Sleeps(),
                auth=_NonAsciiToken(),  # type: ignore[arg-type]
            )
            await deliverer.deliver(Batch([make_event(1)]))
        assert server.heads == []  # nothing was sent
    assert kafka.ids(dest.retry_in_topic) == ["e1"]
    failure = deliverer.recent_failures[-1]
    assert failure["outcome"] == "handed_off"
    assert "request not sendable: UnicodeEncodeError" in failure["error"]
