"""A tenant destination's events as the connector holds them: a queue per tenant, and the events leaving HTTP.

Each event's route is read from the lookup cache's memory when it is taken in (a dict read:
the cache never waits for Redis), and the event joins the queue of that route, so events of
different tenants, or of two versions of one tenant's entry, never share a request:

- a route whose queue holds a full batch (`max_batch_records` or `max_batch_bytes`) is cut
  first, at once, even while a poll is still being taken in;
- otherwise, under a backlog (`crowded`: the connector is behind, `connector.handler`), the
  longest queue is cut whole, so a long tail of tenants shares the buffer in batches as large
  as it allows instead of a request per tenant per poll; unless the queue that waited longest
  has waited `OLDEST_WAIT_MAX_MS`: then it goes first, so no tenant waits behind the others'
  backlog for long (and the committed offsets, which stop at the oldest unfinished event, keep
  moving);
- otherwise (the connector keeps up) the queue that waited longest is cut whole once its first
  event has waited `max_linger_s` (`[lookups]`): a tenant's events wait at most that long for
  its batch to fill, then for a free in-flight slot (a queue cut in part goes to the back).
  Until then nothing is cut (`next_batch` returns None).

A route its rate limits hold back (`holds_back`: it owes tokens, `connector.rate_limits`) is
passed over while another route has events, so a limited tenant's waiting does not take the
in-flight slots of the others; its events stay queued (and count toward the buffer's bound).

Events that leave the HTTP path (`next_diversion`, before any batch):
- no tenant in the event (the field is missing, empty or not a string or integer): dead letter,
  `unknown_tenant`; no entry can ever match it;
- no entry for the tenant: to the retrier with the cause `unknown_tenant` (its entry may
  arrive later; after the last tier it is a dead letter with that reason, not `expired`);
- the tenant is disabled: dead letter, `tenant_disabled`, or `filtered` when its entry says
  `when_disabled = "filter"`;
- the tenant's filter drops the event: `filtered`.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import itertools
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

from aiokafka import TopicPartition

from connector.divert import Diversion
from connector.linger import LingerSchedule
from connector.rebatch import Batch
from connector.tenant_queue import SEPARATOR_BYTES, TenantQueue
from hifi.envelope import Event
from hifi.vocabulary import Outcome, Reason
from tenants.route import Route

_UNSEEN = object()
_STALE_LENGTHS_MAX = 4096  # stale entries of `_by_length` beyond twice the queues: rebuilt
OLDEST_WAIT_MAX_MS = 5_000  # a crowded buffer cuts the longest queue, unless one waited this long


class _Fate(enum.Enum):
    """Why an event leaves the HTTP path."""

    NAMELESS = "no tenant in the event"
    UNKNOWN = "no entry for its tenant"
    DISABLED = "its tenant is disabled"
    DISABLED_FILTERED = "its tenant is disabled, and its entry filters its events"
    FILTERED = "its tenant's filter drops it"


_value_of = attrgetter("value")


class TenantPending:
    """Events taken in for a destination with `[lookups]`; a `connector.rebatch.Pending`.

    A route is read once per tenant in each call of `extend` (the records of one partition of a
    poll), so the cache's reads count tenants per poll, not events.
    """

    def __init__(
        self,
        route_of: Callable[[str], Route | None],
        *,
        tenant_field: str,
        max_records: int,
        max_bytes: int,
        holds_back: Callable[[Route], bool] | None = None,
        max_linger_s: float = 0.0,
        linger: LingerSchedule | None = None,
    ) -> None:
        """`route_of`: the lookup cache's `get`; `holds_back`: whether a route's rate limits
        hold its next batch back now; `max_linger_s`: how long a queue short of a full batch
        waits for more events while the connector keeps up; `linger`: that wait as it adapts
        (`connector.linger`), told how late each lingering queue is cut, in its place."""
        self._route_of = route_of
        self._linger = linger or LingerSchedule(max_linger_s, max_linger_s)
        self._holds_back = holds_back
        self._tenant_field = tenant_field
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._queues: OrderedDict[Route, TenantQueue] = OrderedDict()  # the longest waiting first
        self._orders = itertools.count()  # each queue's `order`, as it joins the end
        # (-length, order, queue) as each queue grew: the longest queue without a scan of all
        # of them (stale entries are dropped when met, and all rebuilt when they pile up).
        # Kept only while the buffer is crowded (None otherwise: built again when next asked)
        self._by_length: list[tuple[int, int, TenantQueue]] | None = None
        self._full: dict[Route, None] = {}  # routes whose queue holds a full batch, in order
        self._diverted: deque[Diversion] = deque()
        self._count = 0
        self._queued_bytes = 0  # of the bodies queued, with their separators
        self._diverted_bytes = 0

    def __len__(self) -> int:
        return self._count

    def extend(self, events: Sequence[Event]) -> None:
        """Queue events by route, or set them apart to leave the HTTP path.

        Per event this is a dict read and an append for tenants whose route passes every event
        as it is (the route itself is read once per tenant of the call); everything else (no
        tenant or entry, disabled, filter, projection) takes a slower path.
        """
        seen: dict[object, Route | None] = {}  # this call's routes by tenant
        queue_of: dict[object, Any] = {}  # this call's queues by tenant (None: the slow path)
        route_of, queues, full = self._route_of, self._queues, self._full
        max_records, max_bytes = self.max_records, self.max_bytes
        unseen, separator_bytes = _UNSEEN, SEPARATOR_BYTES
        slow: list[Event] = []
        queued_bytes = 0
        for event in events:
            tenant = event.tenant
            try:
                queue = queue_of.get(tenant, unseen)
            except TypeError:  # a JSON array or object as the tenant: no tenant
                slow.append(event)
                continue
            if queue is unseen:  # the tenant's first event in this call
                route = seen[tenant] = route_of(tenant) if type(tenant) is str else None
                queue = None
                if route is not None and route.passes_all:
                    queue = queues.get(route)
                    if queue is None:
                        queue = queues[route] = TenantQueue(route, next(self._orders))
                queue_of[tenant] = queue
            if queue is None:
                slow.append(event)
                continue
            queue.append(event)
            added = len(event.value) + separator_bytes
            queue.size_bytes += added
            queued_bytes += added
            if len(queue) >= max_records or queue.size_bytes >= max_bytes:
                full[queue.route] = None
        self._count += len(events)
        self._queued_bytes += queued_bytes
        self._note_lengths(queue for queue in queue_of.values() if queue is not None)
        if slow:
            self._route_slowly(slow, seen)

    def _note_lengths(self, grown: Iterable[TenantQueue]) -> None:
        """Remember the length of queues that grew, for `_longest` (while it keeps them)."""
        by_length, push = self._by_length, heapq.heappush
        if by_length is None:
            return
        for queue in grown:
            push(by_length, (-len(queue), queue.order, queue))
        if len(by_length) > 2 * len(self._queues) + _STALE_LENGTHS_MAX:
            self._by_length = [(-len(q), q.order, q) for q in self._queues.values()]
            heapq.heapify(self._by_length)

    def _longest(self) -> TenantQueue:
        """The queue with the most events, the one that waited longest among equals (as
        `max(queues, key=len)` in waiting order), in O(log n) amortized."""
        by_length, queues = self._by_length, self._queues
        if by_length is None:
            by_length = self._by_length = [(-len(q), q.order, q) for q in queues.values()]
            heapq.heapify(by_length)
        while by_length:
            negative_length, order, queue = by_length[0]
            current = queues.get(queue.route) is queue and queue.order == order
            if current and -negative_length == len(queue):
                return queue
            heapq.heappop(by_length)
        return max(queues.values(), key=len)  # not reached: every queue noted its length

    @property
    def size_bytes(self) -> int:
        """The bytes of the events held: queued (as their bodies), or set apart."""
        return self._queued_bytes + self._diverted_bytes

    def _route_slowly(self, events: list[Event], seen: dict[object, Route | None]) -> None:
        """No tenant, no entry, a disabled tenant, a filter or a projection: each event's fate."""
        fates: dict[_Fate, list[Event]] = {}
        for event in events:
            fate = self._fate(event, seen)
            if fate is not None:
                fates.setdefault(fate, []).append(event)
        for fate, group in fates.items():
            self._set_apart(self._diversion(fate, group))

    def _fate(self, event: Event, seen: dict[object, Route | None]) -> _Fate | None:
        """Why an event leaves the HTTP path; None when it was queued (filtered or projected)."""
        tenant = _tenant_id(event.tenant)
        if tenant is None:
            return _Fate.NAMELESS
        route = seen.get(tenant, _UNSEEN)
        if route is _UNSEEN:  # an integer's digits, or a tenant read here first
            route = seen[tenant] = self._route_of(tenant)
        if not isinstance(route, Route):
            return _Fate.UNKNOWN
        if not route.enabled:
            return _Fate.DISABLED_FILTERED if route.filter_when_disabled else _Fate.DISABLED
        body = route.admit(event.value)
        if body is None:
            return _Fate.FILTERED
        self._enqueue(route, event, body)
        return None

    def _diversion(self, fate: _Fate, events: list[Event]) -> Diversion:
        """The outcome of `events`, with a line saying why (tenant ids are not secrets)."""
        first = _tenant_id(events[0].tenant)
        if fate is _Fate.NAMELESS:
            field = self._tenant_field
            why = f"no tenant: field {field!r} is missing, empty, or not a string or an integer"
            return Diversion(Outcome.DEAD_LETTERED, events, why, Reason.UNKNOWN_TENANT)
        if fate is _Fate.UNKNOWN:
            names = {_tenant_id(event.tenant) for event in events}
            others = f" and {len(names) - 1} other tenants" if len(names) > 1 else ""
            why = f"no entry for tenant {first!r}{others}; the retrier tries again: it may arrive"
            return Diversion(Outcome.HANDED_OFF, events, why, Reason.UNKNOWN_TENANT)
        if fate is _Fate.DISABLED:
            why = f"tenant {first!r} is disabled"
            return Diversion(Outcome.DEAD_LETTERED, events, why, Reason.TENANT_DISABLED)
        if fate is _Fate.DISABLED_FILTERED:
            why = f"tenant {first!r} is disabled; its entry filters its events"
            return Diversion(Outcome.FILTERED, events, why)
        return Diversion(Outcome.FILTERED, events, "dropped by the tenant's filter")

    def _enqueue(self, route: Route, event: Event, body: bytes) -> None:
        """Queue an event (counted already) as `body`; `extend` inlines this for plain routes."""
        queue = self._queues.get(route)
        if queue is None:
            queue = self._queues[route] = TenantQueue(route, next(self._orders))
        queue.append(event)
        self._note_lengths((queue,))
        if queue.bodies is not None:
            queue.bodies.append(body)
        queue.size_bytes += len(body) + SEPARATOR_BYTES
        self._queued_bytes += len(body) + SEPARATOR_BYTES
        if len(queue) >= self.max_records or queue.size_bytes >= self.max_bytes:
            self._full[route] = None

    def _set_apart(self, diversion: Diversion) -> None:
        self._diverted.append(diversion)
        self._diverted_bytes += sum(map(len, map(_value_of, diversion.events)))

    def fills_a_batch(self) -> bool:
        return bool(self._full)

    def next_diversion(self) -> Diversion | None:
        """The oldest group of events set apart, if any."""
        if not self._diverted:
            return None
        diversion = self._diverted.popleft()
        self._count -= len(diversion.events)
        self._diverted_bytes -= sum(map(len, map(_value_of, diversion.events)))
        return diversion

    def next_batch(
        self, *, crowded: bool = False, max_records: int | None = None, linger: bool = True
    ) -> Batch | None:
        """A full batch of a route if one has it; else, `crowded`, the events of the longest
        queue (unless the oldest waited too long); else those of the route that waited longest
        (all of them, within the bounds), once they waited `max_linger_s` (None before, unless
        `linger` is False); `max_records`: fewer than the bound."""
        if not crowded:
            self._by_length = None  # `_longest` is not asked while the buffer keeps up
        queue = self._choose(crowded, self._holds_back, linger)
        if queue is None:
            return None
        route = queue.route
        before_bytes = queue.size_bytes
        events, bodies = queue.take(max_records or self.max_records, self.max_bytes)
        self._count -= len(events)
        self._queued_bytes -= before_bytes - queue.size_bytes
        self._full.pop(route, None)
        if len(queue) >= self.max_records or queue.size_bytes >= self.max_bytes:
            self._full[route] = None  # full still: behind the other full queues
        full = len(events) >= self.max_records or bool(queue)  # bool(queue): cut at a bound
        if queue:
            self._queues.move_to_end(route)  # what is left waits behind the other tenants
            queue.order = next(self._orders)
            self._note_lengths((queue,))
        else:
            del self._queues[route]
        return Batch(events, route, bodies, full=full)

    def _choose(
        self, crowded: bool, holds_back: Callable[[Route], bool] | None, linger: bool
    ) -> TenantQueue | None:
        """The queue `next_batch` cuts: its first choice unless its route's rate limits hold it
        back; then the same choice among the routes they do not (all held back: the first).
        None: the choice is a queue still within its linger."""
        if self._full:
            queue = self._queues[next(iter(self._full))]
        else:
            queue = next(iter(self._queues.values()))
            if crowded and queue.waited_ms() < OLDEST_WAIT_MAX_MS:
                queue = self._longest()
        if holds_back is not None and holds_back(queue.route):
            ready = [queue for queue in self._queues.values() if not holds_back(queue.route)]
            full = [queue for queue in ready if queue.route in self._full]
            if full:
                return full[0]
            if ready:
                queue = ready[0]
                if crowded and queue.waited_ms() < OLDEST_WAIT_MAX_MS:
                    queue = max(ready, key=len)
        if linger and not crowded and queue.route not in self._full:
            waited_ms, linger_ms = queue.waited_ms(), self._linger.linger_ms()
            if waited_ms < linger_ms:
                return None
            self._linger.cut(waited_ms - linger_ms)
        return queue

    def sendable(self) -> bool:
        """Whether a route with events is not held back by its rate limits."""
        holds_back = self._holds_back
        if holds_back is None:
            return bool(self._queues)
        return any(not holds_back(queue.route) for queue in self._queues.values())

    def drop(self, partitions: set[TopicPartition]) -> None:
        """Forget the events of `partitions` (revoked, or the connector is stopping)."""
        queues = list(self._queues.values())
        diverted = list(self._diverted)
        self._queues.clear()
        self._by_length = None
        self._full.clear()
        self._diverted.clear()
        self._count = self._queued_bytes = self._diverted_bytes = 0
        for queue in queues:
            for index, event in enumerate(queue):
                if event.tp not in partitions:
                    body = event.value if queue.bodies is None else queue.bodies[index]
                    self._enqueue(queue.route, event, body)
                    self._count += 1
        for diversion in diverted:
            events = [event for event in diversion.events if event.tp not in partitions]
            if events:
                self._set_apart(dataclasses.replace(diversion, events=events))
                self._count += len(events)


def _tenant_id(raw: object) -> str | None:
    """The tenant id of a field's value: a non-empty string, or an integer's digits."""
    if isinstance(raw, str):
        return raw or None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
    return None
