"""How much a process takes on at once: requests in flight and the body bytes they may hold; beyond either, 503.

A request is admitted before its body is read, for the bytes it says it sends
(`Content-Length`) or, without one, for its stream's `max_body_bytes`; it leaves when it is
answered. One that finds no room is answered at once with 503 and `Retry-After`, never queued:
memory stays bounded however fast senders come, and they learn at once to slow down. A
draining process admits nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from hifi.errors import RequestRefused
from ingest import metrics

RETRY_AFTER_S = 1


class Admission:
    """The bounds of one process, counted without locks (one event loop)."""

    def __init__(self, *, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        #: set when the process starts to drain: streams stop reading at once on it
        self.drain = asyncio.Event()

    @property
    def draining(self) -> bool:
        return self.drain.is_set()

    @contextlib.contextmanager
    def admitted(self, reserve_bytes: int) -> Iterator[None]:
        """Hold a place for a request of `reserve_bytes` for the block; `RequestRefused` (503)
        when there is none or the process is draining."""
        if self.draining:
            metrics.SHED.labels("draining").inc()
            raise _busy("draining: this process is stopping; send to another")
        if self.requests >= self.max_requests or (
            self.requests and self.bytes + reserve_bytes > self.max_bytes
        ):
            metrics.SHED.labels("in_flight").inc()
            raise _busy("too many requests in flight")
        self.requests += 1
        self.bytes += reserve_bytes
        metrics.IN_FLIGHT_REQUESTS.set(self.requests)
        metrics.IN_FLIGHT_BYTES.set(self.bytes)
        try:
            yield
        finally:
            self.requests -= 1
            self.bytes -= reserve_bytes
            metrics.IN_FLIGHT_REQUESTS.set(self.requests)
            metrics.IN_FLIGHT_BYTES.set(self.bytes)


def _busy(message: str) -> RequestRefused:
    return RequestRefused(
        f"{message}; try again after {RETRY_AFTER_S} s",
        status=503,
        headers=((b"retry-after", str(RETRY_AFTER_S).encode()),),
    )
