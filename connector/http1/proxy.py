"""Egress proxies: which one serves a request (`ProxyRoutes`), and a CONNECT tunnel through it.

Routes. A destination's catalog key `proxy` serves every request of that destination, http and
https alike; without it, `https_proxy` / `HTTPS_PROXY` serve https URLs and `http_proxy` /
`HTTP_PROXY` http URLs, `all_proxy` / `ALL_PROXY` either when its own is unset (the lowercase
form first, as httpx and curl read them; an empty value is unset). A proxy URL is
`http://[USER:PASSWORD@]HOST[:PORT]` (port 80 if left out; `HOST:PORT` alone is read as http);
the user and password (percent-decoded) become a Basic `Proxy-Authorization`.

`no_proxy` / `NO_PROXY` exclude hosts from either kind of proxy, as curl, Go and httpx read it:
- entries separated by commas (or white space), compared case-insensitively;
- `*` alone: no proxy for any host;
- a name matches itself and every name under it: `example.com` and `.example.com` (the dot is
  optional, as is a leading `*.`) both match `example.com` and `api.example.com`, never
  `badexample.com`; a trailing dot is ignored;
- an IP address matches that address, a CIDR block (`10.0.0.0/8`, `fd00::/8`) every address in
  it; only a URL whose host is written as an address is compared so, names are never resolved;
- `HOST:PORT` (`[::1]:8443` for IPv6) matches that host on that port only.
Loopback is not special: list `localhost,127.0.0.1,::1` to reach local services directly.

Tunnels. `open_tunnel` opens a TCP connection to the proxy, asks `CONNECT host:port`, reads the
reply head and returns the raw transport for the caller's `loop.start_tls`. A refusal (not 2xx)
is `ProxyRefused`, an `httpx.ConnectError`: the connector counts it as unreachable (retried,
never a dead letter). Nothing here writes a proxy password: `Proxy.display` masks it.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import quote, unquote, urlsplit

import httpx

from config.egress import proxy_problem, proxy_secrets
from hifi import redaction
from hifi.errors import ConfigError

__all__ = [
    "MAX_REPLY_HEAD_BYTES",
    "Proxy",
    "ProxyConfigError",
    "ProxyRefused",
    "ProxyRoutes",
    "open_tunnel",
]

MAX_REPLY_HEAD_BYTES = 64 * 1024  # a CONNECT reply head longer than this is refused
_DEFAULT_PORT = 80
_REASON_CHARS = 60
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?\r?\n")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class ProxyConfigError(ConfigError):
    """A proxy URL hifi cannot use (from the environment); the message names the variable, never
    the URL (it may hold a password). Exit code 2."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """One HTTP proxy: where it listens and the credential it is sent."""

    host: str  # a name or an address, IPv6 without brackets
    port: int
    #: the Proxy-Authorization value (b"Basic " + base64(user:password)), or None
    authorization: bytes | None = field(repr=False)
    #: "http://host:port" or "http://user:***@host:port": never the password
    display: str

    @classmethod
    def from_url(cls, url: str, *, where: str) -> Proxy:
        """The proxy of `url`; `ProxyConfigError` naming `where` (a variable, a key) if unusable.
        Its password and credential are registered with `hifi.redaction`."""
        text = url.strip()
        if "://" not in text:
            text = f"http://{text}"  # as httpx and curl read a bare HOST:PORT
        problem = proxy_problem(text)
        if problem is not None:
            raise ProxyConfigError(f"{where}: the proxy URL {problem}")
        parts = urlsplit(text)
        host = (parts.hostname or "").lower()
        port = parts.port or _DEFAULT_PORT
        authority = _authority(host, port)
        if not parts.username:
            return cls(host, port, None, f"http://{authority}")
        user, password = unquote(parts.username), unquote(parts.password or "")
        credential = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        redaction.register([*proxy_secrets(text), password, credential])
        display = f"http://{quote(user, safe='')}:***@{authority}"
        return cls(host, port, f"Basic {credential}".encode("ascii"), display)

    @property
    def address(self) -> str:
        """`http://host:port`, without credentials (for httpx's `Proxy`)."""
        return f"http://{_authority(self.host, self.port)}"

    def __repr__(self) -> str:
        return f"Proxy({self.display})"

    def __str__(self) -> str:
        return self.display


@dataclass(frozen=True, slots=True)
class _Bypass:
    """The hosts of `NO_PROXY`: each with the port it is limited to (None: any port)."""

    everything: bool = False
    names: tuple[tuple[str, int | None], ...] = ()
    networks: tuple[tuple[_IpNetwork, int | None], ...] = ()

    @classmethod
    def parse(cls, text: str) -> _Bypass:
        names: list[tuple[str, int | None]] = []
        networks: list[tuple[_IpNetwork, int | None]] = []
        for entry in re.split(r"[,\s]+", text.strip().lower()):
            if entry == "*":
                return cls(everything=True)
            host, port = _split_port(entry)
            if not host:
                continue  # empty, or a port that is not a number: matches nothing
            try:
                networks.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                name = host.removeprefix("*").lstrip(".").rstrip(".")
                if name:
                    names.append((name, port))
        return cls(False, tuple(names), tuple(networks))

    def matches(self, host: str, port: int) -> bool:
        """True if `host:port` (a URL's host) is to be reached without a proxy."""
        if self.everything:
            return True
        host = host.lower().strip("[]").rstrip(".")
        try:
            address = ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            return any(
                (host == name or host.endswith(f".{name}")) and wanted in (None, port)
                for name, wanted in self.names
            )
        return any(address in net and wanted in (None, port) for net, wanted in self.networks)


class ProxyRoutes:
    """Which proxy, if any, serves a request: the catalog's `proxy` for every scheme, else
    `https_proxy` / `http_proxy` / `all_proxy` from the environment; `no_proxy` excludes hosts
    either way (the rules are in this module's docstring)."""

    __slots__ = ("_by_scheme", "_bypass")

    def __init__(self, by_scheme: Mapping[str, Proxy], bypass: _Bypass) -> None:
        self._by_scheme = dict(by_scheme)
        self._bypass = bypass

    @classmethod
    def from_settings(
        cls, proxy_url: str | None, environ: Mapping[str, str] | None = None
    ) -> ProxyRoutes:
        """The routes of a destination whose catalog `proxy` is `proxy_url` (None: unset), with
        `environ` (None: this process's); `ProxyConfigError` names a variable that is unusable."""
        environ = os.environ if environ is None else environ
        no_proxy = _variable(environ, "no_proxy")
        bypass = _Bypass.parse(no_proxy[1] if no_proxy else "")
        if proxy_url is not None:
            proxy = Proxy.from_url(proxy_url, where="catalog key 'proxy'")
            return cls({"http": proxy, "https": proxy}, bypass)
        by_scheme: dict[str, Proxy] = {}
        fallback = _variable(environ, "all_proxy")
        for scheme in ("http", "https"):
            found = _variable(environ, f"{scheme}_proxy") or fallback
            if found is not None:
                by_scheme[scheme] = Proxy.from_url(
                    found[1], where=f"environment variable {found[0]}"
                )
        return cls(by_scheme, bypass)

    def __bool__(self) -> bool:
        """Whether any request may go through a proxy."""
        return bool(self._by_scheme)

    def proxy_for(self, scheme: str, host: str, port: int) -> Proxy | None:
        """The proxy for a request to `scheme://host:port`, None to connect directly."""
        proxy = self._by_scheme.get(scheme.lower())
        if proxy is None or self._bypass.matches(host, port):
            return None
        return proxy

    def proxy_for_url(self, url: str | httpx.URL) -> Proxy | None:
        """`proxy_for` of an absolute URL (its port, else the scheme's default)."""
        parsed = httpx.URL(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        return self.proxy_for(parsed.scheme, parsed.host, port)

    def describe(self, url: str) -> str:
        """How a request to `url` goes, for people: "through proxy http://user:***@host:port"
        or "direct"."""
        proxy = self.proxy_for_url(url)
        return "direct" if proxy is None else f"through proxy {proxy.display}"

    def summary(self) -> str:
        """Every route, for people: "https through proxy http://host:port, http direct"."""
        routes = ", ".join(
            f"{scheme} {'direct' if proxy is None else f'through proxy {proxy.display}'}"
            for scheme in ("https", "http")
            for proxy in [self._by_scheme.get(scheme)]
        )
        if self._bypass.everything:
            return "direct (NO_PROXY=*)"
        names = len(self._bypass.names) + len(self._bypass.networks)
        return routes + (f"; {names} NO_PROXY entries reached directly" if names else "")

    def httpx_proxy(self, url: httpx.URL) -> httpx.Proxy | None:
        """The `httpx.Proxy` for `url`, None for direct: for requests sent by httpx's own
        transports (token fetches), so they take the same route as deliveries."""
        proxy = self.proxy_for_url(url)
        if proxy is None:
            return None
        headers: dict[bytes, bytes] = {}
        if proxy.authorization is not None:
            headers[b"Proxy-Authorization"] = proxy.authorization
        return httpx.Proxy(proxy.address, headers=headers)

    def __repr__(self) -> str:
        routes = ", ".join(f"{scheme}={proxy.display}" for scheme, proxy in self._by_scheme.items())
        return f"ProxyRoutes({routes or 'direct'})"


class ProxyRefused(httpx.ConnectError):
    """The proxy answered a CONNECT with a status other than 2xx (407: it wants credentials)."""

    def __init__(self, proxy: Proxy, target: str, status: int, reason: str) -> None:
        if status == 407:
            hint = (
                "check the user and password of the proxy URL"
                if proxy.authorization is not None
                else "the proxy URL carries no user and password"
            )
            what = f"proxy authentication required (407); {hint}"
        elif status == 401 and proxy.authorization is not None:
            what = "the proxy refused its credentials (401); check the user and password"
        else:
            what = f"HTTP {status} {redaction.shorten(reason, _REASON_CHARS)}".rstrip()
        super().__init__(f"proxy {proxy.display} refused CONNECT {target}: {what}")
        self.proxy = proxy.display  #: the proxy, as `Proxy.display` writes it
        self.status = status  #: the proxy's status


class _TunnelReply(asyncio.Protocol):
    """Reads the proxy's reply head to a CONNECT, then pauses reading: whatever follows is the
    destination's, for the TLS protocol `start_tls` puts in its place."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        #: (the reply head, whether more bytes came in the same read)
        self.head: asyncio.Future[tuple[bytes, bool]] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport: uvloop's are not subclasses of asyncio.Transport, so no isinstance
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.head.done():
            return  # reading pauses once the head is complete; the caller closes on failure
        self._buffer += data
        end = _HEAD_END.search(self._buffer, 0, MAX_REPLY_HEAD_BYTES + 4)
        if end is None:
            if len(self._buffer) > MAX_REPLY_HEAD_BYTES:
                self._fail(f"a reply head over {MAX_REPLY_HEAD_BYTES // 1024} KiB")
            return
        assert self._transport is not None
        self._transport.pause_reading()
        self.head.set_result((bytes(self._buffer[: end.end()]), end.end() < len(self._buffer)))

    def eof_received(self) -> bool:
        self._fail("the connection closed before its reply")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        cause = "" if exc is None else f": {type(exc).__name__}: {exc}"
        self._fail(f"the connection closed before its reply{cause}")

    def _fail(self, what: str) -> None:
        if not self.head.done():
            self.head.set_exception(httpx.ConnectError(f"{self._where}: {what}"))


async def open_tunnel(
    proxy: Proxy, host: str, port: int, *, timeout_s: float | None
) -> asyncio.Transport:
    """A TCP connection through `proxy` to `host:port`, ready for `loop.start_tls`.

    `CONNECT host:port HTTP/1.1` with Host (and Proxy-Authorization when the proxy has one);
    the reply head is read (at most 64 KiB) and nothing after it. Failures, the connection
    closed: `httpx.ConnectTimeout` after `timeout_s` (the connect and the reply), `ProxyRefused`
    for a status other than 2xx, `httpx.ConnectError` for the rest (refused, DNS, reset, a reply
    that is not HTTP, bytes after a 2xx head before TLS began).
    """
    loop = asyncio.get_running_loop()
    target = _authority(host, port)
    where = f"proxy {proxy.display} (CONNECT {target})"
    transport: asyncio.Transport | None = None
    try:
        async with asyncio.timeout(timeout_s):
            transport, reply = await loop.create_connection(
                lambda: _TunnelReply(where), proxy.host, proxy.port
            )
            transport.write(_connect_request(proxy, target))
            head, more = await reply.head
        _accept(proxy, target, head, more)
    except BaseException as exc:
        if transport is not None:
            transport.close()
        if isinstance(exc, TimeoutError):
            within = "" if timeout_s is None else f" in {timeout_s:g} s"
            raise httpx.ConnectTimeout(f"{where}: no answer{within}") from exc
        if isinstance(exc, OSError):
            raise httpx.ConnectError(f"{where}: {type(exc).__name__}: {exc}") from exc
        raise
    return transport


def _connect_request(proxy: Proxy, target: str) -> bytes:
    lines = [f"CONNECT {target} HTTP/1.1".encode("ascii"), f"Host: {target}".encode("ascii")]
    if proxy.authorization is not None:
        lines.append(b"Proxy-Authorization: " + proxy.authorization)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _accept(proxy: Proxy, target: str, head: bytes, more: bool) -> None:
    """Nothing if `head` opens the tunnel; else the error to raise."""
    status_line = _STATUS_LINE.match(head)
    if status_line is None:
        raise httpx.ConnectError(
            f"proxy {proxy.display} (CONNECT {target}): the reply is not HTTP/1.x"
        )
    status = int(status_line.group(1))
    if not 200 <= status < 300:
        reason = (status_line.group(2) or b"").decode("latin-1")
        raise ProxyRefused(proxy, target, status, reason)
    if more:
        raise httpx.ConnectError(
            f"proxy {proxy.display} (CONNECT {target}): bytes after its {status} reply, before"
            " the TLS handshake"
        )


def _authority(host: str, port: int) -> str:
    """`host:port`, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split_port(entry: str) -> tuple[str, int | None]:
    """The host and port of a NO_PROXY entry ("" for the host when the port is not a number)."""
    host, port = entry, ""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    if not port:
        return host, None
    return (host, int(port)) if port.isascii() and port.isdigit() else ("", None)


def _variable(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(the variable's name, its value) of `name` in lower case, else upper case; None if unset
    or empty."""
    for key in (name.lower(), name.upper()):
        value = environ.get(key, "").strip()
        if value:
            return key, value
    return None
