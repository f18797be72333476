"""Re-batching: cut the events of a poll into requests bounded by record count and body bytes."""

from __future__ import annotations

import hashlib
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from aiokafka import TopicPartition

from hifi.envelope import Event

_SEPARATOR_BYTES = 1  # ',' between array items, '\n' after an NDJSON line
_ARRAY_BRACKETS_BYTES = 2
_BREAKS_TO_SPACES = bytes.maketrans(b"\r\n", b"  ")
_id_of = attrgetter("id")
_partition_of = attrgetter("tp")
_offset_of = attrgetter("offset")
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

    def offsets(self) -> dict[TopicPartition, list[int]]:
        """The offsets of the batch's events per partition (one pass over runs of a partition)."""
        offsets: dict[TopicPartition, list[int]] = {}
        for tp, run in itertools.groupby(self.events, _partition_of):
            offsets.setdefault(tp, []).extend(map(_offset_of, run))
        return offsets

    def idempotency_key(self) -> str:
        """Derived from the event ids only, so every attempt of the same events carries the same key."""
        ids = "\x00".join(map(_id_of, self.events))
        body = ids.encode() + b"\x00" if self.events else b""
        return hashlib.sha256(body).hexdigest()[:40]


class PendingEvents:
    """Events taken in but not yet in a request, in intake order, with their total bytes."""

    def __init__(self, *, max_records: int, max_bytes: int) -> None:
        self.max_records = max_records  # of one batch
        self.max_bytes = max_bytes
        self._events: deque[Event] = deque()
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._events)

    def extend(self, events: Sequence[Event]) -> None:
        self._events.extend(events)
        self.size_bytes += sum(map(len, map(_value_of, events)))

    def fills_a_batch(self) -> bool:
        return len(self._events) >= self.max_records or self.size_bytes >= self.max_bytes

    def next_batch(self) -> Batch:
        """The next request's events, as many as both bounds allow."""
        batch = take_batch(self._events, max_records=self.max_records, max_bytes=self.max_bytes)
        self.size_bytes -= sum(map(len, map(_value_of, batch.events)))
        return batch

    def drop(self, partitions: set[TopicPartition]) -> None:
        """Forget the events of `partitions` (revoked, or the connector is stopping)."""
        self._events = deque(e for e in self._events if e.tp not in partitions)
        self.size_bytes = sum(map(len, map(_value_of, self._events)))


def take_batch(pending: deque[Event], *, max_records: int, max_bytes: int) -> Batch:
    """Take the next request's events from the head of `pending`, within both bounds.

    A single event always fits: the connector dead-letters larger ones before they get here.
    Under backlog this merges what several polls returned; when idle it sends what is there.
    """
    taken: list[Event] = []
    size = _ARRAY_BRACKETS_BYTES
    for _ in range(min(max_records, len(pending))):
        added = len(pending[0].value) + _SEPARATOR_BYTES
        if taken and size + added > max_bytes:
            break
        taken.append(pending.popleft())
        size += added
    return Batch(taken)


def encode_body(events: Sequence[Event], body_format: str) -> tuple[bytes, str]:
    """The request body and its Content-Type; the original JSON bytes are forwarded, not re-encoded."""
    if body_format == "ndjson":
        # A JSON text holds a raw line break only as whitespace between tokens (inside a string
        # it is escaped), so a record printed over several lines becomes one line by turning its
        # breaks into spaces: no parse, nothing about the event changes.
        lines = [
            event.value if b"\n" not in event.value else event.value.translate(_BREAKS_TO_SPACES)
            for event in events
        ]
        return b"\n".join(lines) + b"\n", "application/x-ndjson"
    return b"".join((b"[", b",".join(map(_value_of, events)), b"]")), "application/json"
