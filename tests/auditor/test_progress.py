"""The progress clock after a rebalance: an audit partition read again from where its shares stopped."""

from __future__ import annotations

from aiokafka import TopicPartition

from auditor.progress import ProgressClock
from tests.auditor.test_ledger import T0

AUDIT = TopicPartition("hifi.audit", 0)


def test_a_partition_read_again_from_its_end_is_read_to_now_at_once() -> None:
    """A member assigned again reads an audit partition from its shares' next offset; when
    nothing was written since, the partition is read to its end: its settling goes on at once,
    not after the grace of a partition never read."""
    now = T0 + 3_600_000
    highwater = {AUDIT: 40}
    clock = ProgressClock(highwater.get, lambda: now)
    clock.owned({AUDIT})
    clock.read(AUDIT, 40, T0 + 9_000)
    assert clock.of([AUDIT]) == now

    clock.seek(AUDIT, 40)  # the rebalance: read again from offset 40, the end
    assert clock.of([AUDIT]) == now


def test_a_partition_read_again_from_below_its_end_waits_for_its_records() -> None:
    """Read again from below its end, an audit partition holds the clock until its records are
    read again: the facts dropped at the revocation are applied before a minute settles."""
    now = T0 + 3_600_000
    highwater = {AUDIT: 40}
    clock = ProgressClock(highwater.get, lambda: now)
    clock.owned({AUDIT})
    clock.read(AUDIT, 40, T0 + 9_000)

    clock.seek(AUDIT, 25)
    assert clock.of([AUDIT]) == 0
    clock.read(AUDIT, 32, T0 + 7_000)
    assert clock.of([AUDIT]) == T0 + 7_000
    clock.read(AUDIT, 40, T0 + 9_000)
    assert clock.of([AUDIT]) == now
