"""Egress proxies (`connector.http1.proxy`): which proxy serves a URL (catalog, environment,
NO_PROXY), CONNECT tunnels through a real tinyproxy to an HTTPS server, token fetches through
the destination's proxy, and `--probe` saying which route it took; never a proxy password."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import structlog
import trustme

from config.catalog import Catalog
from connector.bearer import started
from connector.http1.proxy import Proxy, ProxyConfigError, ProxyRefused, ProxyRoutes, open_tunnel
from devstack.destination import TestDestination
from devstack.proxy import TinyProxy
from hifi.errors import ConfigError, TokenUnavailable
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from hifi.oauth2 import ClientCredentials, TokenSource
from tests.connector.proxy_support import PASSWORD, USER, needs_tinyproxy
from tests.connector.test_check import _run
from tests.connector.test_oauth2_bearer import write_auth_destination
from tests.hifi.oauth2_server import OAuth2Server

_ENV = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def _no_env_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without proxy variables, whatever the machine sets."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


# --- routes: pure -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "bypassed"),
    [
        ("example.com", "example.com", 443, True),
        ("example.com", "api.EXAMPLE.com", 443, True),
        (".example.com", "example.com", 443, True),
        ("*.example.com", "a.b.example.com", 443, True),
        ("example.com", "badexample.com", 443, False),
        ("example.com.", "example.com", 443, True),
        ("EXAMPLE.COM", "example.com.", 443, True),
        ("example.com:8443", "example.com", 8443, True),
        ("example.com:8443", "example.com", 443, False),
        ("other.org, example.com ,", "example.com", 443, True),
        ("other.org example.com", "example.com", 443, True),
        ("*", "anything.test", 443, True),
        ("10.0.0.0/8", "10.20.30.40", 443, True),
        ("10.0.0.0/8", "11.0.0.1", 443, False),
        ("10.0.0.0/8", "10.example.com", 443, False),
        ("192.168.1.7", "192.168.1.7", 80, True),
        ("192.168.1.7", "192.168.1.8", 80, False),
        ("::1", "::1", 443, True),
        ("::1", "[::1]", 443, True),
        ("fd00::/8", "fd12::5", 443, True),
        ("[::1]:8443", "::1", 8443, True),
        ("[::1]:8443", "::1", 443, False),
        ("127.0.0.1", "localhost", 443, False),  # names are never resolved
        ("", "example.com", 443, False),
        ("example.com:https", "example.com", 443, False),  # a port that is not a number
    ],
)
def test_no_proxy_rules(no_proxy: str, host: str, port: int, bypassed: bool) -> None:
    """NO_PROXY as curl, Go and httpx read it: names with their subdomains, addresses, CIDR
    blocks, ports, `*`, case-insensitive; a host it lists is reached directly."""
    routes = ProxyRoutes.from_settings("http://proxy.test:3128", {"NO_PROXY": no_proxy})
    assert (routes.proxy_for("https", host, port) is None) is bypassed


def test_environment_variables_and_their_precedence() -> None:
    """Each scheme takes its own variable (lowercase first), ALL_PROXY when it has none; an
    empty value is unset; a bare HOST:PORT is http; without any, requests go direct."""
    routes = ProxyRoutes.from_settings(
        None,
        {
            "https_proxy": "http://lower.test:1",
            "HTTPS_PROXY": "http://upper.test:2",
            "http_proxy": "",
            "ALL_PROXY": "all.test:3",
        },
    )
    https = routes.proxy_for("https", "x.test", 443)
    http = routes.proxy_for("http", "x.test", 80)
    assert https is not None
    assert (https.host, https.port) == ("lower.test", 1)
    assert http is not None
    assert (http.host, http.port, http.display) == (
        "all.test",
        3,
        "http://all.test:3",
    )
    assert routes.proxy_for("ftp", "x.test", 21) is None
    assert ProxyRoutes.from_settings(None, {}).proxy_for("https", "x.test", 443) is None
    default_port = ProxyRoutes.from_settings(None, {"HTTP_PROXY": "http://p.test"})
    assert default_port.proxy_for("http", "x.test", 80) == Proxy(
        "p.test", 80, None, "http://p.test:80"
    )


def test_catalog_proxy_serves_both_schemes_and_no_proxy_still_applies() -> None:
    """The catalog's proxy wins over the environment's for http and https; NO_PROXY excludes
    hosts from it too."""
    environ = {"HTTPS_PROXY": "http://env.test:1", "NO_PROXY": "internal.test"}
    routes = ProxyRoutes.from_settings("http://catalog.test:3128", environ)
    for scheme, port in (("https", 443), ("http", 80)):
        proxy = routes.proxy_for(scheme, "api.test", port)
        assert proxy is not None
        assert proxy.host == "catalog.test"
    assert routes.proxy_for("https", "svc.internal.test", 443) is None
    assert routes.describe("https://svc.internal.test/v1") == "direct"
    assert routes.describe("https://api.test/v1") == "through proxy http://catalog.test:3128"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HTTPS_PROXY", f"socks5://{USER}:{PASSWORD}@p.test:1080"),
        ("https_proxy", f"https://{USER}:{PASSWORD}@p.test:443"),
        ("HTTP_PROXY", f"http://{USER}:{PASSWORD}@:3128"),
        ("ALL_PROXY", f"http://{USER}:{PASSWORD}@p.test:3128/path"),
        ("HTTP_PROXY", f"http://{USER}:{PASSWORD}@p.test:99999"),
    ],
)
def test_unusable_environment_proxy_is_a_config_error_naming_the_variable(
    variable: str, value: str
) -> None:
    """A proxy variable hifi cannot use is one line (exit 2) naming the variable, never its
    password."""
    with pytest.raises(ProxyConfigError) as caught:
        ProxyRoutes.from_settings(None, {variable: value})
    message = str(caught.value)
    assert isinstance(caught.value, ConfigError)
    assert caught.value.exit_code == 2
    assert f"environment variable {variable}:" in message
    assert PASSWORD not in message
    assert "\n" not in message


def test_credentials_are_sent_but_never_shown() -> None:
    """User and password (percent-decoded) become a Basic Proxy-Authorization; the display,
    repr and str of the proxy and of its routes show the user and `***` instead."""
    proxy = Proxy.from_url(f"http://{USER}:{PASSWORD}%40x@proxy.test:3128", where="test")
    assert proxy.authorization == b"Basic " + base64.b64encode(f"{USER}:{PASSWORD}@x".encode())
    assert proxy.display == f"http://{USER}:***@proxy.test:3128"
    assert proxy.address == "http://proxy.test:3128"
    routes = ProxyRoutes.from_settings(f"http://{USER}:{PASSWORD}@proxy.test:3128", {})
    credential = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    for text in (repr(proxy), str(proxy), repr(routes), routes.summary()):
        assert PASSWORD not in text, text
        assert credential not in text, text
    chosen = routes.httpx_proxy(httpx.URL("https://api.test/"))
    assert chosen is not None
    assert chosen.url == httpx.URL("http://proxy.test:3128")
    assert chosen.headers["Proxy-Authorization"] == f"Basic {credential}"
    ipv6 = Proxy.from_url("http://[::1]:3128", where="test")
    assert (ipv6.host, ipv6.display) == ("::1", "http://[::1]:3128")


def test_a_refusal_is_a_connect_error_that_spells_out_407() -> None:
    """ProxyRefused is an httpx.ConnectError (the connector counts it as unreachable) naming the
    proxy, masked, and the status; 407 is spelled out."""
    proxy = Proxy.from_url(f"http://{USER}:{PASSWORD}@proxy.test:3128", where="test")
    refused = ProxyRefused(proxy, "api.test:443", 407, "Proxy Authentication Required")
    assert isinstance(refused, httpx.ConnectError)
    assert str(refused) == (
        f"proxy http://{USER}:***@proxy.test:3128 refused CONNECT api.test:443: proxy"
        " authentication required (407); check the user and password of the proxy URL"
    )
    assert (refused.status, refused.proxy) == (407, proxy.display)
    other = ProxyRefused(proxy, "api.test:443", 403, "Access violation")
    assert str(other).endswith("refused CONNECT api.test:443: HTTP 403 Access violation")


async def test_a_407_answer_to_a_token_request_is_unavailable() -> None:
    """A proxy that reads the token request and answers 407 (http token_url): TokenUnavailable
    naming the proxy, not a refusal of the client credentials (exit 2)."""
    routes = ProxyRoutes.from_settings(f"http://{USER}:{PASSWORD}@proxy.test:3128", {})
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(407, headers={"Proxy-Authenticate": "Basic"})

    credentials = ClientCredentials(
        "http://idp.test/token", "hifi-test", "s3cret-client", attempts=1
    )
    source = TokenSource(
        credentials, transport=httpx.MockTransport(answer), proxies=routes.httpx_proxy
    )
    async with source:
        with pytest.raises(TokenUnavailable) as caught:
            await source.token()
    assert str(caught.value) == (
        "token endpoint http://idp.test/token (client_id 'hifi-test'): proxy"
        " http://proxy.test:3128 answered 407 (proxy authentication required); check the user"
        " and password of the proxy URL"
    )
    assert len(seen) == 1


# --- tunnels against a scripted server in this process --------------------------------------

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[Script], Awaitable[Proxy]]]:
    """Start a loopback "proxy" that runs a script on each connection; yields its `Proxy`."""
    servers: list[asyncio.Server] = []

    async def serve(script: Script) -> Proxy:
        server = await asyncio.start_server(script, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return Proxy("127.0.0.1", port, None, f"http://127.0.0.1:{port}")

    yield serve
    for server in servers:
        server.close()
        await server.wait_closed()


def _answering(reply: bytes, *, hold: bool = True) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        if hold:
            await reader.read()  # until the client closes
        writer.close()

    return script


@pytest.mark.parametrize(
    ("reply", "hold", "said"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", True, "the reply is not HTTP/1.x"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 12_000, True, "a reply head over 64 KiB"),
        (b"HTTP/1.1 200 OK\r\n\r\nhello", True, "bytes after its 200 reply"),
        (b"HTTP/1.1 200 Conn", False, "the connection closed before its reply"),
    ],
)
async def test_broken_replies_are_connect_errors(
    scripted: Callable[[Script], Awaitable[Proxy]], reply: bytes, hold: bool, said: str
) -> None:
    """A reply that is not HTTP, a head over 64 KiB, data after a 200 before TLS began, or a
    connection closed mid-reply: an httpx.ConnectError saying which."""
    proxy = await scripted(_answering(reply, hold=hold))
    with pytest.raises(httpx.ConnectError) as caught:
        await open_tunnel(proxy, "api.test", 443, timeout_s=5)
    assert not isinstance(caught.value, ProxyRefused)
    assert said in str(caught.value)


async def test_a_silent_proxy_is_a_connect_timeout(
    scripted: Callable[[Script], Awaitable[Proxy]],
) -> None:
    """A proxy that never answers the CONNECT: httpx.ConnectTimeout after `timeout_s`."""
    proxy = await scripted(_answering(b"", hold=True))
    with pytest.raises(httpx.ConnectTimeout, match=r"no answer in 0\.2 s"):
        await open_tunnel(proxy, "api.test", 443, timeout_s=0.2)


async def test_the_connect_request_and_an_open_tunnel(
    scripted: Callable[[Script], Awaitable[Proxy]],
) -> None:
    """CONNECT names host:port (IPv6 in brackets) with Host and Proxy-Authorization; after a
    2xx the raw transport is returned, reading paused, the destination's bytes left unread."""
    seen: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.0 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)  # the behaviour: the destination speaks after the 200
        writer.write(b"server-first")
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()

    listening = await scripted(script)
    proxy = Proxy(listening.host, listening.port, b"Basic dTpw", listening.display)
    transport = await open_tunnel(proxy, "::1", 8443, timeout_s=5)
    try:
        assert seen == [
            b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n"
            b"Proxy-Authorization: Basic dTpw\r\n\r\n"
        ]
        assert not transport.is_reading()  # start_tls resumes it for the TLS protocol
    finally:
        transport.close()


# --- through a real tinyproxy ---------------------------------------------------------------


class _Reply(asyncio.Protocol):
    """Collects a reply until its head is complete."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.head: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.closed = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data += data
        if b"\r\n\r\n" in self.data and not self.head.done():
            self.head.set_result(bytes(self.data))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        if not self.head.done():
            self.head.set_exception(ConnectionError(f"closed: {exc}"))


async def _post_through(proxy: Proxy, server: TestDestination, ca: trustme.CA) -> bytes:
    """Tunnel to `server`, TLS over the tunnel, one hand-written POST: the reply's head."""
    loop = asyncio.get_running_loop()
    raw = await open_tunnel(proxy, "127.0.0.1", server.port, timeout_s=5)
    context = ssl.create_default_context()
    ca.configure_trust(context)
    reply = _Reply()
    tls = await loop.start_tls(raw, reply, context, server_hostname="127.0.0.1")
    assert tls is not None
    reply.connection_made(tls)
    body = b'[{"id": "through-proxy", "event_time": 1700000000000}]'
    tls.write(
        b"POST /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    try:
        return await asyncio.wait_for(reply.head, 5)
    finally:
        tls.close()
        await asyncio.wait_for(reply.closed.wait(), 5)


class TestThroughTinyproxy:
    pytestmark = needs_tinyproxy

    async def test_tls_over_a_tunnel_delivers(
        self, tinyproxy: TinyProxy, https_server: TestDestination, ca: trustme.CA
    ) -> None:
        """A CONNECT through tinyproxy, TLS over it with the server's name verified, and one
        request answered 200: the server got the event, tinyproxy logged the CONNECT."""
        proxy = Proxy.from_url(tinyproxy.url(), where="test")
        head = await _post_through(proxy, https_server, ca)
        assert head.startswith(b"HTTP/1.1 200")
        assert https_server.delivered_ids() == ["through-proxy"]
        assert f"CONNECT 127.0.0.1:{https_server.port} HTTP/1.1" in tinyproxy.requests()

    async def test_basic_auth_right_missing_and_wrong(
        self, auth_tinyproxy: TinyProxy, https_server: TestDestination, ca: trustme.CA
    ) -> None:
        """With Basic auth the right credentials open the tunnel; none is ProxyRefused spelling
        out 407; wrong ones are refused too (tinyproxy 1.11 answers 401); no password shown."""
        right = Proxy.from_url(auth_tinyproxy.url(), where="test")
        assert (await _post_through(right, https_server, ca)).startswith(b"HTTP/1.1 200")
        bare = Proxy.from_url(f"http://127.0.0.1:{auth_tinyproxy.port}", where="test")
        with pytest.raises(ProxyRefused) as missing:
            await open_tunnel(bare, "127.0.0.1", https_server.port, timeout_s=5)
        assert missing.value.status == 407
        assert "proxy authentication required (407)" in str(missing.value)
        wrong_password = "wrong-" + PASSWORD
        wrong = Proxy.from_url(auth_tinyproxy.url(password=wrong_password), where="test")
        with pytest.raises(ProxyRefused) as refused:
            await open_tunnel(wrong, "127.0.0.1", https_server.port, timeout_s=5)
        assert refused.value.status in (401, 407)
        assert f"http://{USER}:***@127.0.0.1:{auth_tinyproxy.port}" in str(refused.value)
        assert wrong_password not in str(refused.value)
        assert PASSWORD not in repr(refused.value)

    async def test_a_port_the_proxy_does_not_connect_to_is_refused(
        self, https_server: TestDestination
    ) -> None:
        """tinyproxy's ConnectPort list refuses a CONNECT to any other port: ProxyRefused (403)."""
        with TinyProxy(connect_ports=(443,)) as strict:
            proxy = Proxy.from_url(strict.url(), where="test")
            with pytest.raises(ProxyRefused) as refused:
                await open_tunnel(proxy, "127.0.0.1", https_server.port, timeout_s=5)
        assert refused.value.status == 403
        assert f"refused CONNECT 127.0.0.1:{https_server.port}: HTTP 403" in str(refused.value)

    async def test_a_proxy_that_is_down_is_a_connect_error(self) -> None:
        """Nothing listening where the proxy should be: httpx.ConnectError naming the proxy."""
        with TinyProxy() as stopped:
            url = stopped.url()
        with pytest.raises(httpx.ConnectError, match=r"proxy http://127\.0\.0\.1:\d+ \(CONNECT"):
            await open_tunnel(Proxy.from_url(url, where="test"), "api.test", 443, timeout_s=5)


# --- token fetches and --probe through tinyproxy --------------------------------------------


def _auth_destination(catalog_dir: Path, name: str, server: OAuth2Server, proxy: str) -> None:
    write_auth_destination(catalog_dir, name, server.events_url, server.token_url, proxy=proxy)


def _catalog(catalog_dir: Path, server: OAuth2Server) -> Catalog:
    return Catalog(catalog_dir, environ={"IDP_SECRET": server.client_secret, "PX": PASSWORD})


def _token_posts(proxy: TinyProxy, server: OAuth2Server) -> int:
    return proxy.requests().count(f"POST {server.token_url} HTTP/1.1")


class TestTokensThroughTinyproxy:
    pytestmark = needs_tinyproxy

    async def test_token_fetch_goes_through_the_catalog_proxy(
        self, auth_tinyproxy: TinyProxy, catalog_dir: Path, unique: str
    ) -> None:
        """The catalog's proxy (password from ${PX}) carries the token request, with its
        credentials; nothing logged holds the password."""
        async with OAuth2Server() as server:
            proxy = f"http://{USER}:${{PX}}@127.0.0.1:{auth_tinyproxy.port}"
            _auth_destination(catalog_dir, unique, server, proxy)
            before = _token_posts(auth_tinyproxy, server)
            with structlog.testing.capture_logs() as logs:
                async with started(_catalog(catalog_dir, server).load(unique)) as bearer:
                    assert bearer is not None
                    assert await bearer.token() in server.issued
            assert _token_posts(auth_tinyproxy, server) == before + 1
            assert [r.status for r in server.token_requests] == [200]
            assert PASSWORD not in repr(logs)

    async def test_no_proxy_and_environment_proxies_for_tokens(
        self,
        tinyproxy: TinyProxy,
        catalog_dir: Path,
        unique: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Without a catalog proxy HTTP_PROXY carries the token request; NO_PROXY naming the
        token endpoint's host sends it directly, with the catalog's proxy too."""
        async with OAuth2Server() as server:
            write_auth_destination(catalog_dir, unique, server.events_url, server.token_url)
            monkeypatch.setenv("HTTP_PROXY", tinyproxy.url())
            before = _token_posts(tinyproxy, server)
            async with started(_catalog(catalog_dir, server).load(unique)):
                pass
            assert _token_posts(tinyproxy, server) == before + 1
            monkeypatch.delenv("HTTP_PROXY")
            monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.0/8")
            _auth_destination(catalog_dir, unique, server, tinyproxy.url())
            async with started(_catalog(catalog_dir, server).load(unique)):
                pass
            assert _token_posts(tinyproxy, server) == before + 1
            assert len(server.token_requests) == 2

    async def test_token_fetch_refused_by_the_proxy_is_unavailable(
        self, auth_tinyproxy: TinyProxy, catalog_dir: Path, unique: str
    ) -> None:
        """A proxy that wants credentials the catalog does not give: TokenUnavailable (transient)
        naming the proxy; the token endpoint never sees the request."""
        async with OAuth2Server() as server:
            _auth_destination(
                catalog_dir, unique, server, f"http://127.0.0.1:{auth_tinyproxy.port}"
            )
            # tinyproxy answers 407 and closes before reading all of the POST: the reply, or a
            # reset before it is read
            at = rf"proxy http://127\.0\.0\.1:{auth_tinyproxy.port}"
            through = rf"(no answer through {at}: |{at} answered 407 \(proxy authentication)"
            with pytest.raises(TokenUnavailable, match=through):
                async with started(_catalog(catalog_dir, server).load(unique)):
                    pass
            assert server.token_requests == []

    async def test_probe_prints_the_route_masked(
        self,
        auth_tinyproxy: TinyProxy,
        kafka_settings: KafkaSettings,
        catalog_dir: Path,
        unique: str,
    ) -> None:
        """`--probe` says which proxy the token request and the destination probe go through,
        the password masked, and the token request did go through it."""
        await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
        async with OAuth2Server() as server:
            proxy = f"http://{USER}:${{PX}}@127.0.0.1:{auth_tinyproxy.port}"
            write_auth_destination(
                catalog_dir, unique, server.events_url, server.token_url, topic=unique, proxy=proxy
            )
            before = _token_posts(auth_tinyproxy, server)
            args = ("connector", "--dest", unique, "--catalog", str(catalog_dir), "--probe")
            code, out, err = await _run(
                *args,
                bootstrap=kafka_settings.bootstrap,
                IDP_SECRET=server.client_secret,
                PX=PASSWORD,
            )
        # the password masked, the user name shown (a short one would garble every line)
        masked = f"http://{USER}:***@127.0.0.1:{auth_tinyproxy.port}"
        assert code == 0, out + err
        assert f"egress: https through proxy {masked}, http through proxy {masked}" in out
        assert f"(client_id 'hifi-test'): route: through proxy {masked}" in out
        assert "(client_id 'hifi-test'): token received" in out
        assert f"destination {server.events_url}: route: through proxy {masked}" in out
        assert _token_posts(auth_tinyproxy, server) == before + 1
        assert PASSWORD not in out + err
