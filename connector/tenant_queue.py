"""One tenant route's queue in a tenant destination's buffer (`connector.tenant_pending`)."""

from __future__ import annotations

import time

from hifi.envelope import Event
from tenants.route import Route

SEPARATOR_BYTES = 1  # as `connector.rebatch` counts a body: a separator per event...
ARRAY_BRACKETS_BYTES = 2  # ...and the brackets of a JSON array


class TenantQueue(list[Event]):
    """One route's events in intake order, their body bytes, and the bodies they are sent as
    when the route projects them."""

    __slots__ = ("bodies", "order", "route", "size_bytes")
    __hash__ = object.__hash__  # type: ignore[assignment]  # by identity, like its route

    def __init__(self, route: Route, order: int) -> None:
        super().__init__()
        self.route = route
        self.order = order  # its place in the waiting order: smaller waited longer
        self.bodies: list[bytes] | None = [] if route.projects else None
        self.size_bytes = ARRAY_BRACKETS_BYTES

    def waited_ms(self) -> float:
        """How long its first event has waited since it was taken in."""
        return time.time() * 1000 - self[0].taken_ms

    def take(self, max_records: int, max_bytes: int) -> tuple[list[Event], list[bytes] | None]:
        """The first events within both bounds (always at least one), and their bodies."""
        bodies = self.bodies
        taken: list[bytes] | None = None
        if len(self) <= max_records and self.size_bytes <= max_bytes:  # all of them
            events = self[:]
            self.clear()
            self.size_bytes = ARRAY_BRACKETS_BYTES
            if bodies is not None:
                taken = bodies[:]
                bodies.clear()
            return events, taken
        size, count = ARRAY_BRACKETS_BYTES, 0
        for index in range(min(max_records, len(self))):
            body = self[index].value if bodies is None else bodies[index]
            added = len(body) + SEPARATOR_BYTES
            if count and size + added > max_bytes:
                break
            size += added
            count += 1
        events = self[:count]
        del self[:count]
        taken = None
        if bodies is not None:
            taken = bodies[:count]
            del bodies[:count]
        self.size_bytes -= size - ARRAY_BRACKETS_BYTES
        return events, taken
