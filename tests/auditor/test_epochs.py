"""While a source partition the worker saw start over gives no record yet, the facts about its
events wait; its first record begins a new epoch, and the facts that waited then count in it."""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import TopicPartition

from auditor.epochs import Epochs
from auditor.progress import ProgressClock
from hifi.accounting.incarnations import Incarnations
from hifi.audit import FORMAT_MAJOR, FORMAT_MINOR, Fact, Slice

TP = TopicPartition("orders", 0)
OTHER = TopicPartition("orders", 1)


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    topic: str = "audit"
    partition: int = 0
    value: bytes = b"fact"
    headers: tuple[tuple[str, bytes], ...] = (("hifi-format", b"1.1"),)


def _fact(partition: int, taken_ms: int) -> Fact:
    slices = [Slice("orders", partition, [0], ["id-0"], [taken_ms - 5], [taken_ms])]
    return Fact(FORMAT_MAJOR, FORMAT_MINOR, "f", "d", "test", "delivered", None, None, 0, slices)


def _epochs() -> tuple[Epochs, ProgressClock]:
    clock = ProgressClock(lambda tp: None, lambda: 10_000)
    clock.read(TP, 30, 5_000)  # the old topic, read up to offset 30, last written at 5_000
    return Epochs(Incarnations(), clock, lambda: 10_000), clock


def test_facts_wait_for_the_first_record_of_a_partition_that_started_over() -> None:
    """A fact about the partition waits; its first record begins epoch 1 at its Kafka time,
    and the fact is released to count in it."""
    epochs, clock = _epochs()
    epochs.started_over(TP)
    waiting, elsewhere = Record(1, 0), Record(2, 0)
    assert epochs.holds(_fact(0, 8_000), waiting)
    assert not epochs.holds(_fact(1, 8_000), elsewhere)  # another partition: applied at once
    epoch, released = epochs.of_poll(TP, Record(0, 7_000))  # offset 0, written at 7_000
    assert (epoch, released) == (1, [waiting])
    assert epochs.incarnations.epoch_at("orders", 0, 6_999) == 0  # taken before: the old topic
    assert epochs.incarnations.epoch_at("orders", 0, 8_000) == 1
    assert clock.position(TP) is None  # the old topic's reading forgotten
    assert not epochs.holds(_fact(0, 9_000), Record(3, 0))  # its epoch is known: no wait


def test_a_revoked_partition_releases_the_facts_held_for_it() -> None:
    """Revoked (or stopping): the held facts are applied, not kept for good."""
    epochs, _ = _epochs()
    epochs.started_over(TP)
    held = Record(1, 0)
    assert epochs.holds(_fact(0, 8_000), held)
    assert epochs.drop({OTHER}) == []
    assert epochs.drop({TP}) == [held]
    assert epochs.starting_over == set()


def test_held_facts_survive_a_snapshot() -> None:
    """Held facts' records are committed, so the snapshot keeps them."""
    epochs, _ = _epochs()
    epochs.started_over(TP)
    epochs.holds(_fact(0, 8_000), Record(4, 0, value=b"\x01\x02"))
    (again,) = Epochs.restore(epochs.state())
    assert (again.topic, again.partition, again.offset, again.value) == ("audit", 0, 4, b"\x01\x02")
    assert again.headers == [("hifi-format", b"1.1")]


def test_facts_wait_while_the_high_watermark_is_below_what_was_read() -> None:
    """Before the worker says anything, an end below what was read holds the partition's facts
    (the connector may see the new topic first); an end that catches up releases them."""
    highwater = {TP: 0}  # the topic deleted: its end as the broker reports it
    clock = ProgressClock(highwater.get, lambda: 10_000)
    clock.read(TP, 30, 5_000)
    epochs = Epochs(Incarnations(), clock, lambda: 10_000)
    held = Record(1, 0)
    assert epochs.holds(_fact(0, 8_000), held)
    assert epochs.due() == []
    highwater[TP] = 30  # a lagging leader's end, caught up: the same topic after all
    assert epochs.due() == [held]
    assert not epochs.holds(_fact(0, 8_000), Record(2, 0))
