"""Re-batching: cut the events of a poll into requests bounded by record count and body bytes."""

from __future__ import annotations

import hashlib
import itertools
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol

from aiokafka import TopicPartition

from hifi.envelope import Event

if TYPE_CHECKING:
    from connector.divert import Diversion

_SEPARATOR_BYTES = 1  # ',' between array items, '\n' after an NDJSON line
_ARRAY_BRACKETS_BYTES = 2
_BREAKS_TO_SPACES = bytes.maketrans(b"\r\n", b"  ")
_id_of = attrgetter("id")
_partition_of = attrgetter("tp")
_offset_of = attrgetter("offset")
_value_of = attrgetter("value")


class Target(Protocol):
    """Where a batch goes instead of the destination's url with its headers: a tenant's route."""

    @property
    def name(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


@dataclass(slots=True)
class Batch:
    """Events that travel in one HTTP request.

    `target`: where the request goes when not to the destination's url and headers (one
    tenant's route); `bodies`: what each event is sent as when not its value (a projection);
    `full`: cut at one of the bounds (more events were waiting), not for want of events.
    """

    events: list[Event]
    target: Target | None = None
    bodies: list[bytes] | None = None
    full: bool = False

    def __len__(self) -> int:
        return len(self.events)

    def halves(self) -> tuple[Batch, Batch]:
        middle = len(self.events) // 2
        bodies = self.bodies
        return (
            Batch(self.events[:middle], self.target, None if bodies is None else bodies[:middle]),
            Batch(self.events[middle:], self.target, None if bodies is None else bodies[middle:]),
        )

    def split(self, count: int) -> tuple[Batch, Batch]:
        """The first `count` events and the rest, each a batch to the same target."""
        bodies = self.bodies
        return (
            Batch(self.events[:count], self.target, None if bodies is None else bodies[:count]),
            Batch(self.events[count:], self.target, None if bodies is None else bodies[count:]),
        )

    def values(self) -> Iterable[bytes]:
        """What each event is sent as, in order."""
        return self.bodies if self.bodies is not None else map(_value_of, self.events)

    def offsets(self) -> dict[TopicPartition, list[int]]:
        """The offsets of the batch's events per partition."""
        return offsets_of(self.events)

    def idempotency_key(self) -> str:
        """Derived from the event ids only, so every attempt of the same events carries the same key."""
        ids = "\x00".join(map(_id_of, self.events))
        body = ids.encode() + b"\x00" if self.events else b""
        return hashlib.sha256(body).hexdigest()[:40]


def offsets_of(events: Iterable[Event]) -> dict[TopicPartition, list[int]]:
    """The offsets of `events` per partition (one pass over runs of a partition)."""
    offsets: dict[TopicPartition, list[int]] = {}
    for tp, run in itertools.groupby(events, _partition_of):
        offsets.setdefault(tp, []).extend(map(_offset_of, run))
    return offsets


class Pending(Protocol):
    """Events taken in, not yet in a request nor diverted: how the connector holds them
    (`PendingEvents`; per tenant, `connector.tenant_pending.TenantPending`)."""

    @property
    def size_bytes(self) -> int: ...

    def __len__(self) -> int: ...

    def extend(self, events: Sequence[Event]) -> None: ...

    def fills_a_batch(self) -> bool: ...

    def next_batch(
        self, *, crowded: bool = False, max_records: int | None = None, linger: bool = True
    ) -> Batch | None:
        """The next request's events; `crowded`: the connector is behind (cut where it helps
        most rather than in intake order, if the holder has a choice); `max_records`: fewer
        than a batch's bound (a breaker's probe). None: what it holds waits to fill a batch
        for a while yet (`linger`: if the holder lingers at all)."""

    def next_diversion(self) -> Diversion | None:
        """Events that leave the HTTP path, taken before any batch."""

    def drop(self, partitions: set[TopicPartition]) -> None: ...


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

    def next_batch(
        self, *, crowded: bool = False, max_records: int | None = None, linger: bool = True
    ) -> Batch:
        """The next request's events, as many as both bounds allow, in intake order (it never
        lingers: a plain destination's batches fill while the in-flight slots are taken)."""
        batch = take_batch(
            self._events, max_records=max_records or self.max_records, max_bytes=self.max_bytes
        )
        self.size_bytes -= sum(map(len, map(_value_of, batch.events)))
        return batch

    def next_diversion(self) -> Diversion | None:
        """None: every event of a destination without tenants goes to its url."""
        return None

    def drop(self, partitions: set[TopicPartition]) -> None:
        """Forget the events of `partitions` (revoked, or the connector is stopping)."""
        self._events = deque(e for e in self._events if e.tp not in partitions)
        self.size_bytes = sum(map(len, map(_value_of, self._events)))


def take_batch(pending: deque[Event], *, max_records: int, max_bytes: int) -> Batch:
    """Take the next request's events from the head of `pending`, within both bounds.

    A single event always fits: the connector dead-letters larger ones before they get here.
    Under backlog this merges what several polls returned; when idle it sends what is there.
    """
    taken = list(itertools.islice(pending, min(max_records, len(pending))))
    full = len(taken) == max_records
    body_bytes = sum(map(len, map(_value_of, taken))) + _SEPARATOR_BYTES * len(taken)
    if _ARRAY_BRACKETS_BYTES + body_bytes > max_bytes:  # the bytes bound cuts the batch short
        full = True
        size, count = _ARRAY_BRACKETS_BYTES, 0
        for value in map(_value_of, taken):
            added = len(value) + _SEPARATOR_BYTES
            if count and size + added > max_bytes:
                break
            size, count = size + added, count + 1
        del taken[count:]
    if len(taken) == len(pending):
        pending.clear()
    else:
        for _ in range(len(taken)):
            pending.popleft()
    return Batch(taken, full=full)


def encode_body(events: Sequence[Event], body_format: str) -> tuple[bytes, str]:
    """The request body of these events and its Content-Type (`encode_values` of their values)."""
    return encode_values(map(_value_of, events), body_format)


_CONTENT_TYPES = {
    "json_array": "application/json",
    "ndjson": "application/x-ndjson",
    "single": "application/json",  # unless `[webhook]` says otherwise
}


def content_type(body_format: str) -> str:
    """The Content-Type of a body of `body_format` (what `encode_values` says with it)."""
    return _CONTENT_TYPES[body_format]


def encode_values(values: Iterable[bytes], body_format: str) -> tuple[bytes, str]:
    """The request body and its Content-Type; the JSON bytes are forwarded, not re-encoded."""
    if body_format == "ndjson":
        # A JSON text holds a raw line break only as whitespace between tokens (inside a string
        # it is escaped), so a record printed over several lines becomes one line by turning its
        # breaks into spaces: no parse, nothing about the event changes.
        lines = [
            value if b"\n" not in value else value.translate(_BREAKS_TO_SPACES) for value in values
        ]
        lines.append(b"")  # the last line's break, without copying the body again
        return (b"\n".join(lines) if len(lines) > 1 else b"\n"), _CONTENT_TYPES["ndjson"]
    if body_format == "single":  # one event a request: its bytes as they are
        parts = list(values)
        return (parts[0] if len(parts) == 1 else b"".join(parts)), _CONTENT_TYPES["single"]
    # One join, the brackets fused onto the first and last values: the body is built in one
    # copy (joining the values, then the brackets around them, takes two large allocations and
    # copies instead of one).
    parts = list(values)
    if not parts:
        return b"[]", _CONTENT_TYPES["json_array"]
    parts[0] = b"[" + parts[0]
    parts[-1] += b"]"
    return b",".join(parts), _CONTENT_TYPES["json_array"]
