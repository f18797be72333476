"""Re-batching: cut the events of a poll into requests bounded by record count and body bytes."""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import orjson

from plumbing.envelope import Event

_SEPARATOR_BYTES = 1  # ',' between array items, '\n' after an NDJSON line
_ARRAY_BRACKETS_BYTES = 2
_id_of = attrgetter("id")
_value_of = attrgetter("value")


@dataclass(slots=True)
class Batch:
    """Events that travel in one HTTP request."""

    events: list[Event]

    def __len__(self) -> int:
        return len(self.events)

    def halves(self) -> tuple[Batch, Batch]:
        middle = len(self.events) // 2
        return Batch(self.events[:middle]), Batch(self.events[middle:])

    def idempotency_key(self) -> str:
        """Derived from the event ids only, so every attempt of the same events carries the same key."""
        ids = "\x00".join(map(_id_of, self.events))
        body = ids.encode() + b"\x00" if self.events else b""
        return hashlib.sha256(body).hexdigest()[:40]


def take_batch(pending: deque[Event], *, max_records: int, max_bytes: int) -> Batch:
    """Take the next request's events from the head of `pending`, within both bounds.

    A single event always fits: the connector dead-letters larger ones before they get here.
    Under backlog this merges what several polls returned; when idle it sends what is there.
    """
    taken: list[Event] = []
    size = _ARRAY_BRACKETS_BYTES
    for _ in range(min(max_records, len(pending))):
        added = len(pending[0].value) + _SEPARATOR_BYTES  # Event.size_bytes, without the call
        if taken and size + added > max_bytes:
            break
        taken.append(pending.popleft())
        size += added
    return Batch(taken)


def encode_body(events: Sequence[Event], body_format: str) -> tuple[bytes, str]:
    """The request body and its Content-Type; the original JSON bytes are forwarded, not re-encoded."""
    if body_format == "ndjson":
        lines = [
            event.value if b"\n" not in event.value else orjson.dumps(orjson.loads(event.value))
            for event in events
        ]
        return b"\n".join(lines) + b"\n", "application/x-ndjson"
    return b"".join((b"[", b",".join(map(_value_of, events)), b"]")), "application/json"
