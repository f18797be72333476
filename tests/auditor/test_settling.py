"""A minute's settled judgement (lag percentiles, up or down) does not depend on when the auditor read its facts."""

from __future__ import annotations

from config.destination import Accounting
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.ledger import Ledger
from hifi.vocabulary import Outcome
from tests.auditor.test_ledger import T0, TP, fact

SETTLE_MS = 60_000


def _book() -> Ledger:
    return Ledger("d", Accounting(settle_s=SETTLE_MS / 1000, lag_sla_s=600.0))


def test_an_auditor_catching_up_judges_a_minute_as_one_that_never_stopped() -> None:
    """Events handed off in their minute and delivered after its settling: read before or after it settles, same row."""
    settle_point = T0 + MINUTE_MS + SETTLE_MS
    handed = fact(Outcome.HANDED_OFF, list(range(10)), at_ms=T0 + 2_000)
    delivered = fact(Outcome.DELIVERED, list(range(10)), at_ms=settle_point + 5_000)

    live = _book()  # reads as things happen: the delivery comes after the minute settled
    live.enter(T0, TP, range(10))
    live.apply(handed)
    live.advance(settle_point)
    live.apply(delivered)

    catching_up = _book()  # down meanwhile: reads the whole backlog, then settles
    catching_up.enter(T0, TP, range(10))
    catching_up.apply(handed)
    catching_up.apply(delivered)
    catching_up.advance(settle_point + 6_000)

    ours, theirs = live.buckets[T0], catching_up.buckets[T0]
    assert live.tally(ours) == catching_up.tally(theirs)  # the counts agree already
    assert (live.lags(ours), ours.up, ours.down_reason) == (
        catching_up.lags(theirs),
        theirs.up,
        theirs.down_reason,
    )
