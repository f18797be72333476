"""A destination's health from the audit facts: the last 2xx, the connector's failed batches
and events lately, and its bisection requests apart."""

from __future__ import annotations

import itertools

import msgspec

from auditor.health import STEP_S, WINDOW_S, Health
from hifi.audit import MAX_EVENTS_PER_FACT, Fact, Seen, SentBatch, build_facts
from hifi.vocabulary import Outcome, Reason

T0 = 1_790_000_000_000 - 1_790_000_000_000 % (STEP_S * 1000)  # a step's start
CONNECTOR = "connector@host-a:41"
RETRIER = "retrier@host-b:7"
_batch_ids = (f"b{n}" for n in itertools.count())
NO_BREAKER = {  # no breaker fact read: closed, on no known replica
    "state": "closed",
    "since_ms": None,
    "last_error": None,
    "replicas": 0,
    "replicas_not_closed": 0,
    "open_routes": 0,
    "known_routes": 0,
}


def facts(
    outcome: Outcome,
    at_ms: int,
    *,
    node: str = CONNECTOR,
    reason: Reason | None = None,
    events: int = 3,
    sent: SentBatch | None = None,
) -> list[Fact]:
    """The facts of one outcome; a connector's outcome of a request is of a batch of its own
    unless `sent` names one."""
    seen = [Seen(("src", 0, offset), f"id-{offset}", at_ms - 500) for offset in range(events)]
    if sent is None and node == CONNECTOR:
        sent = SentBatch(next(_batch_ids))
    return build_facts(
        "d", node, outcome, seen, reason=reason, status=None, outcome_ms=at_ms, sent=sent
    )


def of_1_0(written: list[Fact]) -> list[Fact]:
    """The same facts as a connector of format 1.0 wrote them: no batch."""
    return [msgspec.structs.replace(fact, minor=0, batch=None) for fact in written]


def fed(health: Health, now_ms: int, *outcomes: list[Fact]) -> Health:
    for written in outcomes:
        for fact in written:
            health.note(fact, now_ms)
    return health


def test_batches_and_events_count_only_the_connectors_outcomes_of_what_it_sent() -> None:
    """2xx, hand-offs and refusals of the connector are batches sent; re-offers, expiries,
    never-sent letters and events diverted before any request are not, nor the retrier's."""
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
    diverted = build_facts(
        "d",
        CONNECTOR,
        Outcome.HANDED_OFF,
        [Seen(("src", 0, 9), "id-9", T0)],
        reason=None,
        status=None,
        outcome_ms=T0,
    )
    fed(health, T0 + 1000, diverted)  # 1.1 without a batch: a tenant lookup's hand-off
    assert health.view(T0 + 1000) == {
        "last_delivered_ms": T0 - 2000,
        "window_s": WINDOW_S,
        "batches": 4,
        "failed_batches": 2,
        "failed_batch_share": 0.5,
        "events": 12,
        "failed_events": 6,
        "failed_event_share": 0.5,
        "bisection_requests": 0,
        "breaker": NO_BREAKER,
    }


def test_a_rejected_batch_is_one_failed_batch_and_its_bisection_requests_count_apart() -> None:
    """A batch of 1,000 with one poison event, bisected: one failed batch of 1 failed event in
    1,000, and the bisection requests the connector spent, counted once each."""
    batch = "rejected-1"
    parts = [
        facts(Outcome.DELIVERED, T0, events=500, sent=SentBatch(batch, 1)),
        facts(Outcome.DELIVERED, T0, events=250, sent=SentBatch(batch, 3)),
        facts(Outcome.DELIVERED, T0, events=249, sent=SentBatch(batch, 19)),
        facts(
            Outcome.DEAD_LETTERED, T0, events=1, reason=Reason.HTTP_4XX, sent=SentBatch(batch, 20)
        ),
    ]
    view = fed(Health(), T0, *parts, facts(Outcome.DELIVERED, T0, events=1000)).view(T0)
    assert (view["batches"], view["failed_batches"], view["failed_batch_share"]) == (2, 1, 0.5)
    assert (view["events"], view["failed_events"], view["failed_event_share"]) == (2000, 1, 0.0005)
    assert view["bisection_requests"] == 20


def test_facts_of_format_1_0_count_as_before() -> None:
    """A fact without a batch from a 1.0 connector is a batch of its own; the later parts of a
    batch cut into several facts add their events, not a batch."""
    split = of_1_0(facts(Outcome.HANDED_OFF, T0, events=MAX_EVENTS_PER_FACT * 2 + 1))
    assert len(split) == 3
    health = fed(Health(), T0, split, of_1_0(facts(Outcome.DELIVERED, T0)))
    view = health.view(T0)
    assert (view["batches"], view["failed_batches"]) == (2, 1)
    assert (view["events"], view["failed_events"]) == (
        MAX_EVENTS_PER_FACT * 2 + 4,
        MAX_EVENTS_PER_FACT * 2 + 1,
    )


def test_a_batch_written_as_several_facts_counts_once() -> None:
    """A 1.1 batch larger than one fact holds is one batch, all of whose events count."""
    split = facts(Outcome.HANDED_OFF, T0, events=MAX_EVENTS_PER_FACT * 2 + 1)
    assert len(split) == 3
    assert len({fact.batch for fact in split}) == 1
    view = fed(Health(), T0, split, facts(Outcome.HANDED_OFF, T0)).view(T0)
    assert (view["batches"], view["failed_batches"]) == (2, 2)
    assert view["events"] == MAX_EVENTS_PER_FACT * 2 + 4


def test_the_window_slides_by_outcome_time_and_forgets_what_fell_out() -> None:
    """Outcomes older than the window are not counted (read late or aged out); the last 2xx stays."""
    health = Health()
    window_ms = WINDOW_S * 1000
    fed(health, T0, facts(Outcome.DELIVERED, T0 - window_ms - 1000))  # read late: too old
    assert health.view(T0)["batches"] == 0
    assert health.last_delivered_ms == T0 - window_ms - 1000
    fed(health, T0, facts(Outcome.HANDED_OFF, T0 - 60_000), facts(Outcome.DELIVERED, T0))
    assert (health.view(T0)["batches"], health.view(T0)["failed_batches"]) == (2, 1)
    later = T0 + window_ms - 30_000  # the hand-off fell out, the 2xx is still in
    view = health.view(later)
    assert (view["batches"], view["failed_batches"], view["failed_event_share"]) == (1, 0, 0.0)
    assert health.view(T0 + 2 * window_ms) == {
        "last_delivered_ms": T0,
        "window_s": WINDOW_S,
        "batches": 0,
        "failed_batches": 0,
        "failed_batch_share": None,
        "events": 0,
        "failed_events": 0,
        "failed_event_share": None,
        "bisection_requests": 0,
        "breaker": NO_BREAKER,
    }


def test_memory_stays_bounded_over_hours_of_facts() -> None:
    """One fact a second for two hours keeps at most two windows of steps."""
    health = Health()
    for second in range(7200):
        at_ms = T0 + second * 1000
        fed(health, at_ms, facts(Outcome.DELIVERED, at_ms, events=1))
    assert len(health.snapshot()["steps"]) <= 2 * WINDOW_S // STEP_S
    assert health.view(T0 + 7199 * 1000)["batches"] == WINDOW_S  # 30 steps of 10


def test_snapshot_round_trip_keeps_the_last_2xx_and_the_window() -> None:
    """A restarted auditor still knows the last 2xx during an outage; an older auditor's
    snapshot (requests, not batches) gives its last 2xx and no counts."""
    health = fed(Health(), T0, facts(Outcome.DELIVERED, T0 - 1000), facts(Outcome.HANDED_OFF, T0))
    restored = Health()
    restored.restore(health.snapshot())
    assert restored.view(T0 + 5000) == health.view(T0 + 5000)
    assert restored.view(T0 + 5000)["last_delivered_ms"] == T0 - 1000
    older = Health()
    older.restore({"last_delivered_ms": T0 - 1000, "steps": [[T0 // (STEP_S * 1000), 4, 1]]})
    assert (older.last_delivered_ms, older.view(T0)["batches"]) == (T0 - 1000, 0)
