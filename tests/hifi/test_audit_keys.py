"""Audit facts split per origin partition and keyed by it, so each auditor of a group gets its own."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner

from hifi.audit import MAX_EVENTS_PER_FACT, Seen, build_facts, decode_fact, fact_records
from hifi.audit.keys import origin_key, origin_of_key
from hifi.kafka.producing import keyed_partitioner
from hifi.vocabulary import Outcome


def _events(topic: str, partition: int, offsets: range) -> list[Seen]:
    return [
        Seen((topic, partition, o), f"{topic}-{partition}-{o}", 1_000 + o, 2_000) for o in offsets
    ]


def test_an_outcome_over_three_partitions_is_three_facts_each_keyed_by_its_origin() -> None:
    """One request's events from clicks/0, clicks/1 and views/0: three facts, one slice each,
    keyed `clicks/0`, `clicks/1`, `views/0`; every event in exactly one of them."""
    events = (
        _events("clicks", 0, range(3))
        + _events("views", 0, range(2))
        + _events("clicks", 1, range(4))
    )
    facts = build_facts(
        "shop", "connector@h:1", Outcome.DELIVERED, events, reason=None, status=200, outcome_ms=9
    )
    records = fact_records("hifi.audit", facts)
    assert sorted(key or b"" for _, key, _, _ in records) == [b"clicks/0", b"clicks/1", b"views/0"]
    for _, key, value, headers in records:
        fact = decode_fact(value, headers)
        (part,) = fact.slices
        assert origin_of_key(key) == (part.topic, part.partition)
        assert fact.dest == "shop"
    named = sorted(
        (p.topic, p.partition, o)
        for _, _, value, headers in records
        for p in decode_fact(value, headers).slices
        for o in p.offsets
    )
    assert named == sorted(e.origin_parts for e in events)
    assert len({f.fact_id for f in facts}) == 3


def test_a_large_outcome_of_one_partition_is_split_by_the_fact_size_bound() -> None:
    events = _events("clicks", 2, range(MAX_EVENTS_PER_FACT + 5))
    facts = build_facts(
        "shop", "n", Outcome.HANDED_OFF, events, reason=None, status=None, outcome_ms=1
    )
    assert [len(f.slices[0].offsets) for f in facts] == [MAX_EVENTS_PER_FACT, 5]
    assert {origin_key(f.slices[0].topic, f.slices[0].partition) for f in facts} == {b"clicks/2"}


def test_keys_written_before_the_split_name_no_origin() -> None:
    """A destination's name, `topic:NAME`, no key or a non-numeric tail: an unsplit fact, which
    an auditor decodes and takes its own slices of."""
    for key in (b"shop", b"topic:clicks", None, b"", b"a/b", b"/3"):
        assert origin_of_key(key) is None
    assert origin_of_key(b"my.topic-1/12") == ("my.topic-1", 12)


def test_the_producers_partitioner_is_kafkas_default_with_each_keys_hash_kept() -> None:
    """`keyed_partitioner` puts every key where aiokafka's default (Java's murmur2) does, on
    any partition count, and a record without a key on one of the available partitions."""
    partitions = list(range(12))
    for count in (1, 3, 4, 12):
        for key in [origin_key("clicks", p) for p in range(50)] + [b"", b"x", bytes(range(37))]:
            chosen = keyed_partitioner(key, partitions[:count], partitions[:count])
            assert chosen == DefaultPartitioner()(key, partitions[:count], partitions[:count])
    assert keyed_partitioner(None, partitions, [5]) == 5


def test_a_key_whose_partition_is_not_ascii_digits_names_no_origin() -> None:
    """`²` passes `str.isdigit` and `int` refuses it: such a key names no origin, no exception."""
    assert origin_of_key("events/²".encode()) is None
    assert origin_of_key("events/٣".encode()) is None
    assert origin_of_key(b"events/3") == ("events", 3)
