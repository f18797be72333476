"""A reply as the connection reads it: the parser's settings, what counts as a 2xx status line, the
reply handed on (to `connector.http1.decoding`, before httpx sees it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httptools

__all__ = ["Reply", "is_2xx_status_line", "lenient_parser"]

_STATUS_LINE_2XX = re.compile(rb"HTTP/1\.[01] 2[0-9][0-9](?:[ \t][^\r\n]*)?\r?\n")


@dataclass(slots=True)
class Reply:
    """A complete response as read from the wire (its body cut at the connection's cap)."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    http_version: bytes
    #: the connection may serve another request (keep-alive, fully read, not closing)
    reusable: bool
    #: what was odd about it and read anyway (`hifi_connector_reply_anomalies_total{kind}`)
    anomalies: list[str] = field(default_factory=list)


def lenient_parser(protocol: Any) -> httptools.HttpResponseParser:
    """llhttp as RFC 9112 asks of a client: obs-fold lines (section 5.2) and bare LF line ends
    (section 2.2) read; body framing stays strict (an ambiguous one fails the parse)."""
    parser = httptools.HttpResponseParser(protocol)
    parser.set_dangerous_leniencies(lenient_headers=True, lenient_optional_cr_before_lf=True)
    return parser


def is_2xx_status_line(line: bytes) -> bool:
    """Whether `line` (a reply's first bytes) is a whole HTTP/1.x status line with a 2xx code."""
    return _STATUS_LINE_2XX.match(line) is not None
