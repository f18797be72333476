"""Reply header values the connector reads, parsed as ASCII: a value that does not parse is
None (the caller counts it as an anomaly), never an exception.

A destination's header bytes are whatever it sent: non-ASCII digits (`Retry-After: ²` passes
`str.isdigit()`), control characters, values of megabytes. Each reader here accepts only what
its RFC grammar allows and returns None for the rest.
"""

from __future__ import annotations

import re
import time
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = [
    "MAX_RETRY_AFTER_S",
    "charset",
    "content_encodings",
    "content_length",
    "location",
    "retry_after_s",
    "text_of",
]

MAX_RETRY_AFTER_S = 366 * 86_400.0  # a longer wait than a year is read as a year
_MAX_VALUE_CHARS = 8 * 1024  # a value longer than this is not read at all
_MAX_LOCATION_CHARS = 4 * 1024
_DIGITS = re.compile(rb"[0-9]{1,20}")
_ALL_DIGITS = re.compile(rb"[0-9]+")
_ASCTIME = re.compile(rb"[A-Za-z]{3} [A-Za-z]{3} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}")
_SPACES = b" \t"
# RFC 9110 token characters: a charset name, a content coding
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CHARSET_PARAM = re.compile(rb';\s*charset\s*=\s*"?([^";\s]*)"?', re.IGNORECASE)
_KNOWN_CHARSETS = {
    b"utf-8": "utf-8",
    b"utf8": "utf-8",
    b"us-ascii": "ascii",
    b"ascii": "ascii",
    b"iso-8859-1": "latin-1",
    b"latin-1": "latin-1",
    b"latin1": "latin-1",
    b"windows-1252": "cp1252",
    b"utf-16": "utf-16",
    b"utf-16le": "utf-16-le",
    b"utf-16be": "utf-16-be",
}


def _raw(value: bytes | str | None) -> bytes | None:
    """The value as bytes without surrounding white space; None if absent, too long or not ASCII
    text (a `str` from httpx's headers holds one character per byte as it decoded them)."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.isascii():
            return None
        value = value.encode("ascii")
    if len(value) > _MAX_VALUE_CHARS:
        return None
    value = value.strip(_SPACES)
    if not value.isascii() or any(byte < 0x20 or byte == 0x7F for byte in value):
        return None
    return value


def retry_after_s(value: bytes | str | None, *, now_s: float | None = None) -> float | None:
    """Seconds to wait from `Retry-After` (delta-seconds or an HTTP date), at most a year; None
    if absent or unreadable. A date in the past is 0."""
    raw = _raw(value)
    if not raw:
        return None
    if _ALL_DIGITS.fullmatch(raw):  # `int` refuses 4,300 digits and more: cap by length first
        return MAX_RETRY_AFTER_S if len(raw) > 10 else min(float(int(raw)), MAX_RETRY_AFTER_S)
    if not (raw.endswith(b" GMT") or _ASCTIME.fullmatch(raw)):
        return None  # none of RFC 9110's three forms (5.6.7): each is in UTC
    try:
        when = parsedate_to_datetime(raw.decode("ascii")).replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now_s is None else now_s)
    except (TypeError, ValueError, OverflowError, IndexError, OSError):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


def location(value: bytes | str | None) -> str | None:
    """A `Location` value as text (a URI reference, absolute or relative); None if absent,
    empty, over 4 KiB or holding a space or control character."""
    raw = _raw(value)
    if not raw or len(raw) > _MAX_LOCATION_CHARS or b" " in raw or b"\t" in raw:
        return None
    return raw.decode("ascii")


def content_length(value: bytes | str | None) -> int | None:
    """`Content-Length` as a number of bytes; None if absent or not one decimal number."""
    raw = _raw(value)
    if raw is None or not _DIGITS.fullmatch(raw):
        return None
    return int(raw)


def charset(value: bytes | str | None) -> str | None:
    """The Python codec of `Content-Type`'s charset, for a small set of well-known ones; None
    if there is none, or it is not one of them (the caller then reads the bytes as UTF-8)."""
    raw = _raw(value)
    if raw is None:
        return None
    match = _CHARSET_PARAM.search(raw)
    if match is None:
        return None
    return _KNOWN_CHARSETS.get(match.group(1).lower())


def content_encodings(value: bytes | str | None) -> list[str] | None:
    """The codings of `Content-Encoding`, in the order they were applied, lowercased; an empty
    list for none (or only `identity`); None if the value is not a list of tokens."""
    if value is None:
        return []
    raw = _raw(value)
    if raw is None:
        return None
    codings = []
    for part in raw.split(b","):
        part = part.strip(_SPACES)
        if not part:
            continue
        if not _TOKEN.fullmatch(part):
            return None
        coding = part.decode("ascii").lower()
        if coding != "identity":
            codings.append(coding)
    return codings


def text_of(body: bytes, content_type: bytes | str | None) -> str:
    """A body as text for an error excerpt: its charset if well known, else UTF-8; bytes that
    do not decode are replaced, never an exception."""
    return body.decode(charset(content_type) or "utf-8", errors="replace")
