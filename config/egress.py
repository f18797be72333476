"""Where a destination's requests may go: its egress proxy, the origins a redirect may carry
secrets to, and whether a tenant's entry may point at a private address."""

from __future__ import annotations

from urllib.parse import urlsplit

PROXY_RULE = "write the proxy as http://HOST:PORT or http://USER:PASSWORD@HOST:PORT"
ORIGIN_RULE = "write an origin as SCHEME://HOST[:PORT] (http or https, no path)"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def proxy_problem(url: str) -> str | None:
    """Why `url` is not a usable proxy URL, without quoting it (it may hold a password); None if fit."""
    if not url.isascii() or not url.isprintable() or " " in url:
        return f"is not printable ASCII without spaces; {PROXY_RULE}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"is not a URL with a valid port; {PROXY_RULE}"
    if parts.scheme != "http":
        return (
            "must start with http:// (hifi speaks plain HTTP to a proxy; an https"
            f" destination goes through a CONNECT tunnel); {PROXY_RULE}"
        )
    if not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"must name a host and nothing after it; {PROXY_RULE}"
    if port == 0:
        return f"has port 0; {PROXY_RULE}"
    return None


def origin_of_url(url: str) -> str:
    """`scheme://host:port` of an absolute http(s) URL, the port always written, the host lowercased."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{parts.port or _DEFAULT_PORTS.get(scheme, 0)}"


def normalized_origin(text: str) -> str:
    """An origin of `redirect_trusted_origins` in the one form compared: `scheme://host:port`;
    `ValueError` says what is wrong."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"{text!r} has an invalid port; {ORIGIN_RULE}") from None
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{text!r} is not an http or https origin; {ORIGIN_RULE}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{text!r} is more than an origin; {ORIGIN_RULE}")
    return origin_of_url(text)


def proxy_secrets(url: str) -> list[str]:
    """The parts of a proxy URL to mask: its password. Not its user name: a short, common one
    ("hifi") would be masked in every line that says it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    return [parts.password] if parts.password else []
