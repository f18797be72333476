"""A destination's health from the audit facts: the last 2xx, the connector's failed requests lately."""

from __future__ import annotations

from auditor.health import STEP_S, WINDOW_S, Health
from hifi.audit import MAX_EVENTS_PER_FACT, Fact, Seen, build_facts
from hifi.vocabulary import Outcome, Reason

T0 = 1_790_000_000_000 - 1_790_000_000_000 % (STEP_S * 1000)  # a step's start
CONNECTOR = "connector@host-a:41"
RETRIER = "retrier@host-b:7"


def facts(
    outcome: Outcome,
    at_ms: int,
    *,
    node: str = CONNECTOR,
    reason: Reason | None = None,
    events: int = 3,
) -> list[Fact]:
    seen = [Seen(("src", 0, offset), f"id-{offset}", at_ms - 500) for offset in range(events)]
    return build_facts("d", node, outcome, seen, reason=reason, status=None, outcome_ms=at_ms)


def fed(health: Health, now_ms: int, *outcomes: list[Fact]) -> Health:
    for written in outcomes:
        for fact in written:
            health.note(fact, now_ms)
    return health


def test_requests_and_failures_count_only_the_connectors_request_outcomes() -> None:
    """2xx, hand-offs and refusals of the connector are requests; re-offers, expiries and
    never-sent letters are not, nor anything the retrier wrote."""
    health = fed(
        Health(),
        T0 + 1000,
        facts(Outcome.DELIVERED, T0 - 2000),
        facts(Outcome.DELIVERED, T0 - 5000),
        facts(Outcome.HANDED_OFF, T0),
        facts(Outcome.DEAD_LETTERED, T0, reason=Reason.HTTP_4XX),
        facts(Outcome.DEAD_LETTERED, T0, reason=Reason.MALFORMED),
        facts(Outcome.FILTERED, T0),
        facts(Outcome.RE_OFFERED, T0, node=RETRIER),
        facts(Outcome.DEAD_LETTERED, T0, node=RETRIER, reason=Reason.EXPIRED),
        facts(Outcome.HANDED_OFF, T0, node=RETRIER),  # not one of the retrier's, but its node
    )
    assert health.view(T0 + 1000) == {
        "last_delivered_ms": T0 - 2000,
        "window_s": WINDOW_S,
        "requests": 4,
        "failed_requests": 2,
        "failed_share": 0.5,
    }


def test_the_window_slides_by_outcome_time_and_forgets_what_fell_out() -> None:
    """Outcomes older than the window are not counted (read late or aged out); the last 2xx stays."""
    health = Health()
    window_ms = WINDOW_S * 1000
    fed(health, T0, facts(Outcome.DELIVERED, T0 - window_ms - 1000))  # read late: too old
    assert health.view(T0)["requests"] == 0
    assert health.last_delivered_ms == T0 - window_ms - 1000
    fed(health, T0, facts(Outcome.HANDED_OFF, T0 - 60_000), facts(Outcome.DELIVERED, T0))
    assert (health.view(T0)["requests"], health.view(T0)["failed_requests"]) == (2, 1)
    later = T0 + window_ms - 30_000  # the hand-off fell out, the 2xx is still in
    view = health.view(later)
    assert (view["requests"], view["failed_requests"], view["failed_share"]) == (1, 0, 0.0)
    assert health.view(T0 + 2 * window_ms) == {
        "last_delivered_ms": T0,
        "window_s": WINDOW_S,
        "requests": 0,
        "failed_requests": 0,
        "failed_share": None,
    }


def test_memory_stays_bounded_over_hours_of_facts() -> None:
    """One fact a second for two hours keeps at most two windows of steps."""
    health = Health()
    for second in range(7200):
        at_ms = T0 + second * 1000
        fed(health, at_ms, facts(Outcome.DELIVERED, at_ms, events=1))
    assert len(health.snapshot()["steps"]) <= 2 * WINDOW_S // STEP_S
    assert health.view(T0 + 7199 * 1000)["requests"] == WINDOW_S  # 30 steps of 10


def test_a_request_written_as_several_facts_counts_once() -> None:
    """A batch larger than one fact holds is one request."""
    split = facts(Outcome.HANDED_OFF, T0, events=MAX_EVENTS_PER_FACT * 2 + 1)
    assert len(split) == 3
    health = fed(Health(), T0, split, facts(Outcome.HANDED_OFF, T0))
    assert (health.view(T0)["requests"], health.view(T0)["failed_requests"]) == (2, 2)


def test_snapshot_round_trip_keeps_the_last_2xx_and_the_window() -> None:
    """A restarted auditor still knows the last 2xx during an outage."""
    health = fed(Health(), T0, facts(Outcome.DELIVERED, T0 - 1000), facts(Outcome.HANDED_OFF, T0))
    restored = Health()
    restored.restore(health.snapshot())
    assert restored.view(T0 + 5000) == health.view(T0 + 5000)
    assert restored.view(T0 + 5000)["last_delivered_ms"] == T0 - 1000
