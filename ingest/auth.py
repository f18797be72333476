"""Who may write to which stream: bearer tokens checked against the hashes in the stream files.

A token is never kept, logged or compared as it is: its SHA-256 is compared with each stored
hash by `hmac.compare_digest` (constant time). A request without a readable bearer token, or
with one no stream knows, is 401; a token of another stream is 403 on a stream that exists
and 404 on one that does not (so a valid token learns which streams exist, no other caller).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from config.streams import Stream
from hifi.errors import RequestRefused

_CHALLENGE = ((b"www-authenticate", b'Bearer realm="hifi-ingest"'),)


class Tokens:
    """The token hashes of every stream, to authorize a request for one of them."""

    def __init__(self, streams: Mapping[str, Stream]) -> None:
        self._hashes = {
            name: [bytes.fromhex(digest) for digest in stream.tokens_sha256]
            for name, stream in streams.items()
        }

    def authorize(self, authorization: bytes | None, stream: str) -> None:
        """Nothing when the `Authorization` header holds a token of `stream`; else the
        `RequestRefused` (401, 403 or 404) that says why (never the token)."""
        digest = _token_digest(authorization)
        allowed = self._hashes.get(stream)
        if allowed is not None and _any_equal(digest, allowed):
            return
        if not any(_any_equal(digest, hashes) for hashes in self._hashes.values()):
            raise RequestRefused(
                "missing or unknown bearer token: send Authorization: Bearer TOKEN",
                status=401,
                headers=_CHALLENGE,
            )
        if allowed is None:
            raise RequestRefused(f"no stream {stream!r}", status=404)
        raise RequestRefused(f"this token may not write to stream {stream!r}", status=403)


def _token_digest(authorization: bytes | None) -> bytes:
    """The SHA-256 of the bearer token in the header (of nothing, when there is none: no
    stored hash is the hash of an empty token, the stream files refuse a token that short)."""
    scheme, _, token = (authorization or b"").strip().partition(b" ")
    if scheme.lower() != b"bearer":
        token = b""
    return hashlib.sha256(token.strip()).digest()


def _any_equal(digest: bytes, hashes: list[bytes]) -> bool:
    """True if `digest` is one of `hashes`; every one is compared, in constant time."""
    found = False
    for stored in hashes:
        found |= hmac.compare_digest(digest, stored)
    return found
