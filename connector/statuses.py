"""The status policy: what a destination's reply means for the batch, its events and the breaker.

- 2xx: delivered.
- 429, 5xx (and timeouts, connection failures): `DestinationUnavailable`, retried locally, then
  handed to the retrier; they count toward the circuit breaker once they outlast the local
  retries (a connection that cannot be made at all, `Unreachable`, counts at each attempt).
- 3xx (not followed): `DestinationRejected` with reason `redirect`.
- a status of `destination_fault_statuses` (401, 403, 404, 405, 407 by default): the destination
  is at fault, not the events; the batch is not bisected, its events are dead-lettered with
  reason `http_4xx` (a 4xx is never retried) and the breaker counts a failure.
- any other 4xx: the events are at fault; the batch is bisected so only the events refused on
  their own are dead-lettered; the breaker does not count it.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

import httpx

from config.destination import Destination
from hifi.errors import DestinationRejected, DestinationUnavailable
from hifi.redaction import excerpt, short_error
from hifi.vocabulary import Reason

_ERROR_BODY_CHARS = 120


class Unreachable(DestinationUnavailable):
    """No connection could be made (refused, DNS, TLS): a destination-level failure at once."""


def is_destination_fault(dest: Destination, exc: DestinationRejected) -> bool:
    """Whether a refusal says the destination, not the events, is at fault."""
    return exc.status is not None and exc.status in dest.destination_fault_statuses


def parse_retry_after(value: str | None, *, now_s: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_s is None else now_s
    return max(0.0, when.timestamp() - now)


def classify(response: httpx.Response) -> None:
    """Return for 2xx; raise `DestinationUnavailable` (retry) or `DestinationRejected` (never retry)."""
    status = response.status_code
    if 200 <= status < 300:
        return
    detail = short_error(
        f"HTTP {status} {response.reason_phrase}: {excerpt(response.text, _ERROR_BODY_CHARS)}"
    )
    if status == 429 or status >= 500 or status < 200:
        retry_after = (
            parse_retry_after(response.headers.get("retry-after")) if status in (429, 503) else None
        )
        raise DestinationUnavailable(detail, status=status, retry_after_s=retry_after)
    if 300 <= status < 400:
        where = response.headers.get("location", "?")
        raise DestinationRejected(
            short_error(
                f"HTTP {status} redirect to {where}; set follow_redirects = true if intended"
            ),
            status=status,
            reason=Reason.REDIRECT,
        )
    raise DestinationRejected(detail, status=status, reason=Reason.HTTP_4XX)


def status_class(status: int) -> str:
    return f"{status // 100}xx"
