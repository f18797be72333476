"""The bisection plan (`connector.bisection.Bisection`) on its own: what it asks to send and dead-letter."""

from __future__ import annotations

from connector.bisection import Bisection, DeadLetter, Send
from connector.rebatch import Batch
from hifi.errors import DestinationRejected
from hifi.vocabulary import Reason


def _batch(size: int) -> Batch:
    return Batch([object() for _ in range(size)])  # type: ignore[misc]


def _refused(reason: Reason = Reason.HTTP_4XX) -> DestinationRejected:
    return DestinationRejected("400 Bad Request", status=400, reason=reason)


def test_a_batch_refused_whole_is_halved_until_the_refused_event_stands_alone() -> None:
    """Both halves go out before a refused half is split; the lone refused event is dead-lettered
    with the requests spent so far, and the plan ends."""
    events = _batch(4)
    plan = Bisection(events, _refused(), budget=10)
    first, second = plan.next(), plan.next()
    assert isinstance(first, Send)
    assert isinstance(second, Send)
    assert (len(first.batch), first.spent, second.spent) == (2, 1, 2)
    plan.rejected(first.batch, _refused())
    third, fourth = plan.next(), plan.next()
    assert isinstance(third, Send)
    assert isinstance(fourth, Send)
    plan.rejected(fourth.batch, _refused())
    last = plan.next()
    assert isinstance(last, DeadLetter)
    assert (last.batch.events, last.spent, last.note) == (fourth.batch.events, 4, "")
    assert plan.next() is None


def test_a_spent_budget_dead_letters_the_refused_group_whole() -> None:
    """Under two requests left, a refused group is dead-lettered whole, with a note saying why."""
    plan = Bisection(_batch(4), _refused(), budget=1)
    step = plan.next()
    assert isinstance(step, DeadLetter)
    assert step.note == " (in a rejected group of 4; bisection budget spent)"
    assert plan.next() is None


def test_a_refusal_that_is_not_the_events_fault_is_not_bisected() -> None:
    """A forbidden destination dead-letters the batch at once, no request spent."""
    events = _batch(4)
    plan = Bisection(events, _refused(Reason.FORBIDDEN_DESTINATION), budget=10)
    step = plan.next()
    assert isinstance(step, DeadLetter)
    assert (step.batch, step.spent) == (events, 0)
    assert plan.next() is None
