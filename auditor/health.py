"""A destination's health as the connector met it: its last 2xx, and its failed batches and events lately.

The retrier sees only what failed; the connector's audit facts say what became of every batch
it sent: `delivered` (a 2xx), `handed_off` (local attempts ran out), `dead_lettered` for a
refusal of the destination (`http_4xx`, `redirect`). Facts of the retrier (re-offers, expiries),
dead letters of records never sent (`malformed`, `too_large`) and events diverted before any
request are not counted.

Counted in batches and in events. A fact of format 1.1 names its batch (`Fact.batch`): a batch
counts once, when its first fact is read, and fails when it was handed off or refused, whatever
its bisection cost (a rejected batch is one failed batch); its failed events are those handed
off or dead-lettered. The requests spent bisecting it are counted apart, from the running count
each fact carries (`Fact.bisection_requests`). A 1.0 fact names no batch: it counts as a batch
of its own, as before, except the later parts of a batch of more than `MAX_EVENTS_PER_FACT`
events. Batches whose facts may continue (bisected or cut into parts) are remembered, up to
`MAX_OPEN_BATCHES` per destination and not over a restart: a bisection read across a restart
may count its batch twice.

Counts are kept per `STEP_S` seconds of outcome time, only for the last `WINDOW_S` seconds of
the auditor's wall clock (at most twice as many steps: a node whose clock runs ahead): a few
integers per destination, whatever the traffic. Fed one fact at a time by the auditor's event
loop, after a repeated fact was set aside.

Breaker facts (format 1.2) name no events: they go to the destination's circuit breakers
(`auditor/breakers.py`), shown as the health's `breaker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.breakers import BreakerStates, restore_from
from hifi.audit import BREAKER, MAX_EVENTS_PER_FACT, Fact, component_of
from hifi.vocabulary import Outcome, Reason

WINDOW_S = 300
STEP_S = 10
MAX_OPEN_BATCHES = 1024
_STEP_MS = STEP_S * 1000
_STEPS = WINDOW_S // STEP_S
_REQUESTING = "connector"  # the component whose facts are outcomes of batches sent
_REFUSALS = frozenset({Reason.HTTP_4XX, Reason.REDIRECT})  # dead letters the destination answered
# a step's counts, by position
_BATCHES, _FAILED_BATCHES, _EVENTS, _FAILED_EVENTS, _BISECTION_REQUESTS = range(5)


class Health:
    """One destination's last 2xx, and its batches, events and bisection requests of the last
    `WINDOW_S` seconds."""

    __slots__ = ("_open", "_split", "_steps", "breakers", "last_delivered_ms")

    def __init__(self) -> None:
        self.last_delivered_ms: int | None = None  # outcome time of the newest 2xx
        self._steps: dict[int, list[int]] = {}  # outcome_ms // _STEP_MS -> counts, by position
        self._split: tuple[str, int] | None = None  # (node, outcome_ms) of a 1.0 batch in parts
        self._open: dict[str, int] = {}  # batch id -> bisection requests counted, oldest first
        self.breakers = BreakerStates()

    def note(self, fact: Fact, now_ms: int) -> None:
        """Count one fact (not a repeated one) read at `now_ms` on the auditor's clock."""
        if fact.outcome == BREAKER:
            if fact.breaker is not None:
                self.breakers.note(fact.breaker, fact.outcome_ms, now_ms)
            return
        failed = self._failed(fact)
        if failed is None:
            return
        if component_of(fact.node) != _REQUESTING:
            return
        if fact.batch is not None:
            first, bisection_requests = self._first_of_batch(fact.batch, fact)
        elif fact.minor == 0:
            first, bisection_requests = not self._continues_split(fact), 0
        else:
            return  # 1.1 without a batch: events diverted before any request
        counts = self._counts_at(fact.outcome_ms // _STEP_MS, now_ms // _STEP_MS)
        if counts is None:
            return
        events = fact.events()
        if first:
            counts[_BATCHES] += 1
            counts[_FAILED_BATCHES] += failed or fact.bisection_requests > 0
        counts[_EVENTS] += events
        counts[_FAILED_EVENTS] += events if failed else 0
        counts[_BISECTION_REQUESTS] += bisection_requests

    def _failed(self, fact: Fact) -> bool | None:
        """Whether a batch outcome failed (None: not the outcome of a request); a 2xx moves
        `last_delivered_ms`."""
        outcome = fact.outcome
        if outcome == Outcome.DELIVERED:
            if self.last_delivered_ms is None or fact.outcome_ms > self.last_delivered_ms:
                self.last_delivered_ms = fact.outcome_ms
            return False
        if outcome == Outcome.HANDED_OFF or (
            outcome == Outcome.DEAD_LETTERED and fact.reason in _REFUSALS
        ):
            return True
        return None

    def _first_of_batch(self, batch: str, fact: Fact) -> tuple[bool, int]:
        """Whether `fact` is the first of `batch`, and the bisection requests it adds to those
        the batch's earlier facts reported; a batch whose facts may continue is remembered."""
        counted = self._open.pop(batch, None)
        spent = fact.bisection_requests
        if spent > 0 or fact.events() == MAX_EVENTS_PER_FACT:
            self._open[batch] = max(spent, counted or 0)
            if len(self._open) > MAX_OPEN_BATCHES:
                del self._open[next(iter(self._open))]
        return counted is None, max(0, spent - (counted or 0))

    def _continues_split(self, fact: Fact) -> bool:
        """Whether 1.0 `fact` is a later part of the batch the previous fact began: every part
        but the last holds `MAX_EVENTS_PER_FACT` events, and all share node and outcome time."""
        key = (fact.node, fact.outcome_ms)
        continues = self._split == key
        self._split = key if fact.events() == MAX_EVENTS_PER_FACT else None
        return continues

    def _counts_at(self, step: int, now_step: int) -> list[int] | None:
        """The counts of `step`; None when it is outside the window (read late, or from a clock
        far ahead)."""
        if not now_step - _STEPS < step <= now_step + _STEPS:
            return None
        counts = self._steps.get(step)
        if counts is None:
            for old in [s for s in self._steps if s <= now_step - _STEPS]:
                del self._steps[old]
            counts = self._steps[step] = [0] * 5
        return counts

    def view(self, now_ms: int) -> dict[str, Any]:
        """The `health` of a destination in the auditor's `/status`."""
        first_step = now_ms // _STEP_MS - _STEPS + 1
        total = [0] * 5
        for step, counts in self._steps.items():
            if step >= first_step:
                total = [a + b for a, b in zip(total, counts, strict=True)]
        batches, failed_batches, events, failed_events, bisection_requests = total
        return {
            "last_delivered_ms": self.last_delivered_ms,
            "window_s": WINDOW_S,
            "batches": batches,
            "failed_batches": failed_batches,
            "failed_batch_share": round(failed_batches / batches, 4) if batches else None,
            "events": events,
            "failed_events": failed_events,
            "failed_event_share": round(failed_events / events, 4) if events else None,
            "bisection_requests": bisection_requests,
            "breaker": self.breakers.view(now_ms),
        }

    def snapshot(self) -> dict[str, Any]:
        """The state to carry over a restart: the last 2xx stays known during an outage."""
        return {
            "last_delivered_ms": self.last_delivered_ms,
            "steps": [[step, *counts] for step, counts in self._steps.items()],
            "breakers": self.breakers.snapshot(),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """The state of `snapshot`; steps of an older auditor (requests, not batches and
        events) are left out."""
        last = state["last_delivered_ms"]
        self.last_delivered_ms = None if last is None else int(last)
        self._steps = {
            int(step): [int(n) for n in counts]
            for step, *counts in state["steps"]
            if len(counts) == 5
        }
        self.breakers = restore_from(state)


def restore_health(
    healths: Mapping[str, Health], restored: set[str], states: Mapping[str, Any]
) -> None:
    """The health a share's snapshot kept (the member's that wrote it): the first one read of
    each destination (`restored` names them) is taken whole, the newest 2xx of any."""
    for name, state in states.items():
        health = healths.get(name)
        if health is None:
            continue
        if name not in restored:
            restored.add(name)
            health.restore(state)
        elif state["last_delivered_ms"] is not None:
            last = int(state["last_delivered_ms"])
            health.last_delivered_ms = max(last, health.last_delivered_ms or last)
