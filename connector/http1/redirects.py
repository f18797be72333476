"""Which redirects the transport follows, and what a hop to another origin may carry.

Only 307 and 308 are followed (with `follow_redirects`), with the same method and body: they
are the redirects that say so. 301, 302 and 303 are returned as they are: a client that
follows them turns a POST into a GET without a body, and the GET's 2xx would count as a
delivery of events nobody received. At most `MAX_HOPS` hops; the reply after the last is
returned whatever it is.

A hop to another origin (scheme, host or port) than the request's first carries only the
headers that describe the body (`KEPT_ACROSS_ORIGINS`), never `[headers]` values, the OAuth2
token or the client certificate, unless the catalog trusts that origin
(`redirect_trusted_origins`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import httpx

from connector.http1.connection import Origin
from connector.http1.fields import location

__all__ = ["FOLLOWED_STATUSES", "KEPT_ACROSS_ORIGINS", "MAX_HOPS", "Outgoing", "next_hop"]

MAX_HOPS = 3
FOLLOWED_STATUSES = frozenset({307, 308})
KEPT_ACROSS_ORIGINS = frozenset(
    {
        b"host",
        b"content-type",
        b"content-length",
        b"content-encoding",
        b"transfer-encoding",
        b"idempotency-key",
        b"user-agent",
        b"accept",
        b"accept-encoding",
        b"connection",
    }
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One request as the transport writes it: the first, or a redirect's hop."""

    method: bytes
    url: httpx.URL
    origin: Origin
    headers: list[tuple[bytes, bytes]]  # as httpx set them, Host and Content-Length included
    body: bytes
    #: no client certificate (a hop to an origin the catalog does not trust)
    bare: bool = False


def origin_of(url: httpx.URL) -> Origin:
    """(scheme, host, port) of an http or https URL; `httpx.UnsupportedProtocol` for another."""
    scheme = url.scheme
    if scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"{scheme!r} URLs are not supported: {url}")
    if not url.host:
        raise httpx.UnsupportedProtocol(f"no host in the URL {url}")
    return scheme, url.host, url.port or _DEFAULT_PORTS[scheme]


def origin_text(origin: Origin) -> str:
    """`scheme://host:port`, as `redirect_trusted_origins` holds them."""
    scheme, host, port = origin
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def next_hop(
    sent: Outgoing, first: Origin, raw_location: bytes | None, trusted: frozenset[str]
) -> Outgoing | None:
    """The request a 307 or 308 to `sent` asks for; None when its `Location` is missing,
    unreadable or not an http(s) URL (the redirect is then returned as the reply)."""
    where = location(raw_location)
    if where is None:
        return None
    try:
        url = sent.url.join(where)
        origin = origin_of(url)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError):
        return None
    kept = origin == first or origin_text(origin) in trusted
    headers = [
        (name, value)
        for name, value in sent.headers
        if name.lower() != b"host" and (kept or name.lower() in KEPT_ACROSS_ORIGINS)
    ]
    headers.insert(0, (b"Host", url.netloc))  # httpx's netloc: no user info, no default port
    return replace(sent, url=url, origin=origin, headers=headers, bare=not kept)
