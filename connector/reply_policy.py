"""The status policy: what a destination's reply means for the batch, its events and the breaker.

- 2xx: delivered (a 2xx to the request that carried the events: the transport never follows
  a redirect that would change the method).
- 429, 5xx, 1xx (and timeouts, connection failures): `DestinationUnavailable`, retried
  locally, then handed to the retrier; they count toward the circuit breaker once they outlast
  the local retries (a connection that cannot be made at all, `Unreachable`, counts at each
  attempt).
- 3xx that reached here (301/302/303 always; 307/308 when not followed, or after 3 hops):
  `Moved`, the destination moved: handed to the retrier at once with cause `redirect`, and
  the breaker counts a failure; never dead-lettered.
- a status of `destination_fault_statuses` (401, 403, 404, 405, 407 by default): the destination
  is at fault, not the events; the batch is not bisected, its events are dead-lettered with
  reason `http_4xx` (a 4xx is never retried) and the breaker counts a failure.
- any other 4xx: the events are at fault; the batch is bisected so only the events refused on
  their own are dead-lettered; the breaker does not count it.

Header values are read by `connector.http1.fields`, as ASCII: one that does not parse is
ignored and noted (`note(kind)`), never an exception.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from config.destination import Destination
from connector.http1 import fields
from connector.http1.decoding import Answer
from hifi.errors import DestinationRejected, DestinationUnavailable
from hifi.redaction import excerpt, short_error
from hifi.vocabulary import Reason

_ERROR_BODY_CHARS = 120
_FOLLOWABLE = frozenset({307, 308})


class Unreachable(DestinationUnavailable):
    """No connection could be made (refused, DNS, TLS, a proxy's refusal): a destination-level
    failure at once."""


class Moved(DestinationUnavailable):
    """A redirect not followed: the destination moved. Not retried locally (it will not move
    back within a second); handed to the retrier with cause `redirect`."""

    cause = Reason.REDIRECT


def is_destination_fault(dest: Destination, exc: DestinationRejected) -> bool:
    """Whether a refusal says the destination, not the events, is at fault."""
    return exc.status is not None and exc.status in dest.destination_fault_statuses


def parse_retry_after(value: str | bytes | None, *, now_s: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if unreadable."""
    return fields.retry_after_s(value, now_s=now_s)


def classify(answer: Answer, note: Callable[[str], None] | None = None) -> None:
    """Return for 2xx; raise `DestinationUnavailable` (retry), `Moved` (a redirect not followed)
    or `DestinationRejected` (never retry). `note(kind)` is told of each header value that did
    not parse."""
    status = answer.status
    if 200 <= status < 300:
        return
    if 300 <= status < 400:
        raise _moved(answer, note)
    text = fields.text_of(answer.body, answer.header(b"content-type"))
    phrase = answer.reason
    detail = short_error(f"HTTP {status} {phrase}: {excerpt(text, _ERROR_BODY_CHARS)}")
    if status == 429 or status >= 500 or status < 200:
        retry_after = None
        if status in (429, 503):
            raw = answer.header(b"retry-after")
            retry_after = fields.retry_after_s(raw)
            if raw is not None and retry_after is None and note is not None:
                note("retry_after")
        raise DestinationUnavailable(detail, status=status, retry_after_s=retry_after)
    raise DestinationRejected(detail, status=status, reason=Reason.HTTP_4XX)


#: a request that could not be written at all: a URL that does not parse (a tenant's, as its
#: entry renders it), a header value that is not ASCII (an OAuth2 server's token)
UNSENDABLE = (httpx.InvalidURL, UnicodeEncodeError)


def no_reply(
    exc: httpx.TransportError | httpx.InvalidURL | UnicodeEncodeError | TimeoutError,
    timeout_s: float,
) -> tuple[str, DestinationUnavailable]:
    """A request that got no reply: its `hifi_connector_requests_total` class (`timeout` or
    `connection`) and the failure, `Unreachable` when no request reached the destination (one
    that could not be written included: the destination's fault, never the events')."""
    name = type(exc).__name__
    if isinstance(exc, UNSENDABLE):
        return "connection", Unreachable(short_error(f"request not sendable: {name}: {exc}"))
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "timeout", DestinationUnavailable(f"timeout after {timeout_s}s ({name}: {exc})")
    error = short_error(f"connection error: {name}: {exc}")
    if isinstance(exc, httpx.ConnectError):
        return "connection", Unreachable(error)  # refused, DNS, TLS, a proxy: nothing sent
    return "connection", DestinationUnavailable(error)


def _moved(answer: Answer, note: Callable[[str], None] | None) -> Moved:
    status = answer.status
    raw = answer.header(b"location")
    where = fields.location(raw)
    if where is None and raw is not None and note is not None:
        note("location")
    said = f"HTTP {status} redirect to {where or '(no readable Location)'}: the destination moved"
    if status in _FOLLOWABLE:
        said += " (307/308 are followed with follow_redirects = true, 3 hops at most)"
    else:
        said += "; a 301/302/303 is never followed for a POST: update url"
    return Moved(short_error(said), status=status)


def status_class(status: int) -> str:
    return f"{status // 100}xx"
