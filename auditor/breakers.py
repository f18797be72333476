"""A destination's circuit breakers as its connectors' breaker facts tell them: the newest change per route and replica.

Each connector replica writes a breaker fact (`hifi/audit/facts.py`, format 1.2) when one of its
breakers changes: the destination's own (route None) or a tenant route's. The auditor keeps the
newest change per (route, replica), by the time the fact was written, so facts read out of order
or repeated change nothing. The destination's breaker is the worst over its replicas (open, then
half-open, then closed); tenant routes are shown as a count of those not closed, never by name.

An entry is forgotten once it is closed and older than `CLOSED_KEPT_S`, or not closed and older
than `STALE_S` (a replica that stopped while its breaker was open: a live one writes a fact at
least every `breaker_max_open_s` while open). The entries ride in the auditor's snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass
from typing import Any

from hifi.audit import BREAKER_STATES, BreakerChange

CLOSED_KEPT_S = 600
STALE_S = 3600
_RANK = {state: rank for rank, state in enumerate(BREAKER_STATES)}  # closed < half_open < open
_CLOSED = BREAKER_STATES[0]


@dataclass(frozen=True, slots=True)
class Known:
    """The newest change of one breaker at one replica."""

    route: str | None
    replica: str
    state: str
    since_ms: int
    last_error: str | None
    changed_ms: int  # when the fact was written (its outcome time)


class BreakerStates:
    """The newest known change of each (route, replica) breaker of one destination."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[tuple[str | None, str], Known] = {}

    def note(self, change: BreakerChange, changed_ms: int, now_ms: int) -> None:
        """Take one breaker fact's change, written at `changed_ms`, read at `now_ms`."""
        key = (change.route, change.replica)
        old = self._known.get(key)
        if old is None or changed_ms >= old.changed_ms:
            self._known[key] = Known(
                change.route,
                change.replica,
                change.state,
                change.since_ms,
                change.last_error,
                changed_ms,
            )
        self._expire(now_ms)

    def _expire(self, now_ms: int) -> None:
        for key in [key for key, known in self._known.items() if _expired(known, now_ms)]:
            del self._known[key]

    def view(self, now_ms: int) -> dict[str, Any]:
        """The `breaker` of a destination's health: the state of its own breaker (the worst
        over its replicas), since when, the last error, and how many tenant routes are not
        closed."""
        live = [known for known in self._known.values() if not _expired(known, now_ms)]
        own = [known for known in live if known.route is None]
        worst = max(own, key=lambda k: (_RANK[k.state], -k.since_ms), default=None)
        routes = {known.route for known in live if known.route is not None}
        open_routes = {k.route for k in live if k.route is not None and k.state != _CLOSED}
        state = _CLOSED if worst is None else worst.state
        return {
            "state": state,
            "since_ms": None if worst is None or state == _CLOSED else worst.since_ms,
            "last_error": None if worst is None or state == _CLOSED else worst.last_error,
            "replicas": len({known.replica for known in own}),
            "replicas_not_closed": sum(1 for known in own if known.state != _CLOSED),
            "open_routes": len(open_routes),
            "known_routes": len(routes),
        }

    def snapshot(self) -> list[list[Any]]:
        return [list(astuple(known)) for known in self._known.values()]

    def restore(self, entries: Iterable[Any]) -> None:
        """The entries of `snapshot`; ones in an unknown state are left out."""
        self._known = {}
        for route, replica, state, since_ms, last_error, changed_ms in entries:
            if state in _RANK:
                known = Known(route, replica, state, int(since_ms), last_error, int(changed_ms))
                self._known[route, replica] = known


def _expired(known: Known, now_ms: int) -> bool:
    kept_s = CLOSED_KEPT_S if known.state == _CLOSED else STALE_S
    return now_ms - known.changed_ms > kept_s * 1000


def restore_from(state: Mapping[str, Any]) -> BreakerStates:
    """The breakers of a health snapshot (none in a snapshot of an older auditor)."""
    breakers = BreakerStates()
    breakers.restore(state.get("breakers", ()))
    return breakers
