"""A reply's body as the connector reads it: a 2xx body is never decoded; an error body is
decoded incrementally, at most `DECODED_MAX_BYTES`, for its excerpt.

A destination's `Content-Encoding` is whatever it says: a 600-byte gzip body can expand to
256 MiB. httpx decodes a body whole, on the event loop; here each coding's output is bounded
before it is produced (zlib's `max_length`), so a bomb costs at most the cap in memory and
a fraction of a millisecond of CPU.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from connector.http1.fields import content_encodings
from connector.http1.reply import Reply

__all__ = ["DECODED_MAX_BYTES", "Answer", "answer_of", "response_of"]

#: an error body is read for a 120-character excerpt: this is plenty
DECODED_MAX_BYTES = 64 * 1024
_WBITS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
_HIDDEN = frozenset({b"content-encoding"})
# httpx builds the request a redirect asks for even when not following it, and raises on a
# `Location` it cannot parse: the transport follows redirects itself, httpx never sees one
_HIDDEN_IN_REDIRECTS = frozenset({b"content-encoding", b"location"})


@dataclass(frozen=True, slots=True)
class Answer:
    """What a destination answered a request, as the delivery's policy reads it: the status,
    the headers as sent (a redirect's `Location` and the `Content-Encoding` included), the body
    (a 2xx's as it came, never decoded; an error's decoded within `DECODED_MAX_BYTES`), and what
    was odd about it and read anyway."""

    status: int
    reason: str
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes
    anomalies: tuple[str, ...] = ()

    def header(self, name: bytes) -> bytes | None:
        """The value of header `name` (lower case) as sent, the first if repeated; None if absent."""
        for key, value in self.headers:
            if key.lower() == name:
                return bytes(value)
        return None

    @classmethod
    def of_response(cls, response: httpx.Response) -> Answer:
        """The answer an httpx response holds (another transport's: respx, a mock); the headers
        as sent when the connector's transport kept them (`hifi.reply_headers`)."""
        extensions = response.extensions
        return cls(
            response.status_code,
            response.reason_phrase,
            extensions.get("hifi.reply_headers") or response.headers.raw,
            response.content,
            tuple(extensions.get("hifi.anomalies", ())),
        )


def answer_of(reply: Reply) -> Answer:
    """The answer of a reply: its body raw for a 2xx, decoded within the cap otherwise."""
    status = reply.status
    body = reply.body if 200 <= status < 300 else _decoded(reply, reply.anomalies)
    phrase = reply.reason.decode("ascii", errors="ignore")  # as httpx reads it
    reason = phrase if reply.reason else httpx.codes.get_reason_phrase(status)
    return Answer(status, reason, reply.headers, body, tuple(reply.anomalies))


def response_of(reply: Reply) -> httpx.Response:
    """httpx's response for a reply, its body already read: raw for a 2xx (never decoded),
    decoded within the cap otherwise. `Content-Encoding`, which httpx would act on again, is
    left out, and a redirect's `Location`: the reply's headers as sent are in the
    `hifi.reply_headers` extension."""
    anomalies = reply.anomalies
    body = reply.body
    if not 200 <= reply.status < 300:
        body = _decoded(reply, anomalies)
    extensions: dict[str, object] = {
        "http_version": reply.http_version,
        "hifi.anomalies": tuple(anomalies),
        "hifi.reply_headers": reply.headers,
    }
    if reply.reason:  # else httpx gives the status's standard phrase
        extensions["reason_phrase"] = reply.reason
    hidden = _HIDDEN_IN_REDIRECTS if 300 <= reply.status < 400 else _HIDDEN
    headers = reply.headers
    if any(name.lower() in hidden for name, _ in headers):
        headers = [(name, value) for name, value in headers if name.lower() not in hidden]
    return httpx.Response(reply.status, headers=headers, content=body, extensions=extensions)


def _decoded(reply: Reply, anomalies: list[str]) -> bytes:
    """The body with its codings undone, each one's output at most `DECODED_MAX_BYTES`; as sent
    when a coding is unknown or does not decode."""
    values = [value for name, value in reply.headers if name.lower() == b"content-encoding"]
    codings = content_encodings(b", ".join(values)) if values else []
    body = reply.body  # at most the connection's cap already
    if codings is None:
        anomalies.append("content_encoding")
        return body
    for coding in reversed(codings):
        decoded = _undo(coding, body)
        if decoded is None:
            anomalies.append("content_encoding")
            return reply.body
        body = decoded
    return body


def _undo(coding: str, data: bytes) -> bytes | None:
    """`data` with one coding undone, at most `DECODED_MAX_BYTES`; None: unknown or corrupt."""
    wbits = _WBITS.get(coding)
    if wbits is None:
        return None
    attempts = [wbits, -zlib.MAX_WBITS] if coding == "deflate" else [wbits]  # raw deflate too
    for bits in attempts:
        try:
            return zlib.decompressobj(bits).decompress(data, DECODED_MAX_BYTES)
        except zlib.error:
            continue
    return None
