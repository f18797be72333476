"""Fault scripting for the test destination: replies, the per-request script, what is recorded."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec


@dataclass(frozen=True)
class Reply:
    """How the destination answers one request.

    `status` is ignored when `drop` is set; `delay_s` applies before answering or dropping.
    """

    status: int = 200
    retry_after: str | None = None
    delay_s: float = 0.0
    drop: bool = False

    def __post_init__(self) -> None:
        if not 200 <= self.status <= 599:
            raise ValueError(f"reply status {self.status} is not a final HTTP status (200-599)")
        if self.delay_s < 0:
            raise ValueError(f"reply delay_s {self.delay_s} is negative; use 0 or more")


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the destination read and answered it.

    `body` and `events` are empty when the destination runs with `record_bodies=False`;
    `ids` (the events' id fields, as strings, in order) are always kept.
    """

    received_ms: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    events: list[dict[str, object]]
    status: int
    ids: tuple[str, ...] = ()


class Delivery(msgspec.Struct, frozen=True):
    """One event accepted (answered 2xx): its id, when its request was read, and its event time.

    `event_time` is the event's event-time field as sent (None when absent), so lag is
    `received_ms - event_time` for producers that stamp epoch milliseconds. A msgspec struct:
    made and written as JSON lines in C, at a receipt per event.
    """

    id: str
    received_ms: int
    event_time: object


@dataclass(frozen=True)
class Decision:
    """The reply chosen for a request and the reason given in an error body."""

    reply: Reply
    reason: str


_ACCEPT = Decision(Reply(), "accepted")


class Script:
    """Picks the reply for each request: rejections, then the scripted queue, then random faults.

    Only a request that reaches a stage consumes from it: a rejected request leaves the
    queue untouched and draws no random number.
    """

    def __init__(self) -> None:
        self._queue: deque[Reply] = deque()
        self._rejected_ids: dict[str, int] = {}
        self._poison: tuple[str, int] | None = None
        self._fault_ratio = 0.0
        self._fault_replies: tuple[Reply, ...] = ()
        self._rng = random.Random(0)

    def enqueue(self, replies: Iterable[Reply]) -> None:
        """Queue replies for the next requests, one each."""
        self._queue.extend(replies)

    def reject_ids(self, ids: Iterable[str], status: int) -> None:
        """Answer `status` to any request containing one of `ids` (adds to earlier calls)."""
        Reply(status)  # validates the status
        self._rejected_ids.update(dict.fromkeys(ids, status))

    def reject_poison(self, field: str, status: int) -> None:
        """Answer `status` to any request containing an event whose `field` is JSON true."""
        Reply(status)
        self._poison = (field, status)

    def set_faults(self, ratio: float, replies: Sequence[Reply], *, seed: int) -> None:
        """Answer a seeded-random fraction `ratio` of requests with a reply drawn from `replies`."""
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"fault ratio {ratio} is outside 0..1")
        if ratio > 0 and not replies:
            raise ValueError(f"fault ratio {ratio} needs at least one fault reply")
        self._fault_ratio = ratio
        self._fault_replies = tuple(replies)
        self._rng = random.Random(seed)

    def reset(self) -> None:
        """Forget every queued reply, rejection and random fault: answer 200 from now on."""
        self._queue.clear()
        self._rejected_ids.clear()
        self._poison = None
        self.set_faults(0.0, (), seed=0)

    @property
    def reads_events(self) -> bool:
        """Whether a choice needs the events' fields beyond their ids (a poison rule)."""
        return self._poison is not None

    def choose(self, ids: Sequence[str], events: Sequence[dict[str, object]]) -> Decision:
        """Decide the reply for a request carrying `events` with ids `ids`."""
        rejection = self._rejection(ids, events)
        if rejection is not None:
            return rejection
        if self._queue:
            return Decision(self._queue.popleft(), "scripted reply")
        if self._fault_ratio > 0 and self._rng.random() < self._fault_ratio:
            return Decision(self._rng.choice(self._fault_replies), "injected fault")
        return _ACCEPT

    def _rejection(
        self, ids: Sequence[str], events: Sequence[dict[str, object]]
    ) -> Decision | None:
        if self._rejected_ids:
            for event_id in ids:
                status = self._rejected_ids.get(event_id)
                if status is not None:
                    return Decision(Reply(status), f"event {event_id!r} rejected")
        if self._poison is not None:
            field, status = self._poison
            if any(event.get(field) is True for event in events):
                return Decision(Reply(status), f"event with {field}=true rejected")
        return None
