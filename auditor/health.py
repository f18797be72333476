"""A destination's health as the connector met it: its last 2xx, and the share of its requests that failed lately.

The retrier sees only what failed; the connector's audit facts say what became of every
request: `delivered` (a 2xx), `handed_off` (local attempts ran out), `dead_lettered` for a
refusal of the destination (`http_4xx`, `redirect`). Those are the request outcomes counted
here, one per request. Facts of the retrier (re-offers, expiries) and dead letters of records
never sent (`malformed`, `too_large`) are no requests to the destination and are not counted.
A request of more than `MAX_EVENTS_PER_FACT` events is written as several facts; it counts once.

Counts are kept per `STEP_S` seconds of outcome time, only for the last `WINDOW_S` seconds of
the auditor's wall clock (at most twice as many steps: a node whose clock runs ahead): a few
integers per destination, whatever the traffic. Fed one fact at a time by the auditor's event
loop, after a repeated fact was set aside.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hifi.audit import MAX_EVENTS_PER_FACT, Fact, component_of
from hifi.vocabulary import Outcome, Reason

WINDOW_S = 300
STEP_S = 10
_STEP_MS = STEP_S * 1000
_STEPS = WINDOW_S // STEP_S
_REQUESTING = "connector"  # the component whose facts are request outcomes
_REFUSALS = frozenset({Reason.HTTP_4XX, Reason.REDIRECT})  # dead letters the destination answered


class Health:
    """One destination's last 2xx and its request outcomes of the last `WINDOW_S` seconds."""

    __slots__ = ("_split", "_steps", "last_delivered_ms")

    def __init__(self) -> None:
        self.last_delivered_ms: int | None = None  # outcome time of the newest 2xx
        self._steps: dict[int, list[int]] = {}  # outcome_ms // _STEP_MS -> [requests, failed]
        self._split: tuple[str, int] | None = None  # (node, outcome_ms) of a request cut in facts

    def note(self, fact: Fact, now_ms: int) -> None:
        """Count one fact (not a repeated one) read at `now_ms` on the auditor's clock."""
        outcome = fact.outcome
        if outcome == Outcome.DELIVERED:
            failed = 0
            if self.last_delivered_ms is None or fact.outcome_ms > self.last_delivered_ms:
                self.last_delivered_ms = fact.outcome_ms
        elif outcome == Outcome.HANDED_OFF or (
            outcome == Outcome.DEAD_LETTERED and fact.reason in _REFUSALS
        ):
            failed = 1
        else:
            return
        if component_of(fact.node) != _REQUESTING or self._continues_split(fact):
            return
        step, now_step = fact.outcome_ms // _STEP_MS, now_ms // _STEP_MS
        if not now_step - _STEPS < step <= now_step + _STEPS:
            return  # read late (an auditor catching up) or from a clock far ahead
        counts = self._steps.get(step)
        if counts is None:
            self._forget_before(now_step - _STEPS + 1)
            counts = self._steps[step] = [0, 0]
        counts[0] += 1
        counts[1] += failed

    def _continues_split(self, fact: Fact) -> bool:
        """Whether `fact` is a later part of the request the previous fact began: every part
        but the last holds `MAX_EVENTS_PER_FACT` events, and all share node and outcome time."""
        key = (fact.node, fact.outcome_ms)
        continues = self._split == key
        self._split = key if fact.events() == MAX_EVENTS_PER_FACT else None
        return continues

    def _forget_before(self, first_step: int) -> None:
        for step in [s for s in self._steps if s < first_step]:
            del self._steps[step]

    def view(self, now_ms: int) -> dict[str, Any]:
        """The `health` of a destination in the auditor's `/status`."""
        first_step = now_ms // _STEP_MS - _STEPS + 1
        requests = failed = 0
        for step, (of_step, failed_of_step) in self._steps.items():
            if step >= first_step:
                requests += of_step
                failed += failed_of_step
        return {
            "last_delivered_ms": self.last_delivered_ms,
            "window_s": WINDOW_S,
            "requests": requests,
            "failed_requests": failed,
            "failed_share": round(failed / requests, 4) if requests else None,
        }

    def snapshot(self) -> dict[str, Any]:
        """The state to carry over a restart: the last 2xx stays known during an outage."""
        return {
            "last_delivered_ms": self.last_delivered_ms,
            "steps": [[step, *counts] for step, counts in self._steps.items()],
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        last = state["last_delivered_ms"]
        self.last_delivered_ms = None if last is None else int(last)
        self._steps = {int(step): [int(n), int(f)] for step, n, f in state["steps"]}
