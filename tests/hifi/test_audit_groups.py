"""Audit format 1.4: the facts of outcomes written together, one record per origin partition."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest

from hifi.audit import (
    AuditTrail,
    FactRefused,
    Refusal,
    Seen,
    build_facts,
    decode_fact,
    decode_facts,
    fact_records,
)
from hifi.audit.facts import HDR_FACTS, grouped_records
from hifi.vocabulary import Outcome


def _seen(topic: str, partition: int, offsets: range) -> list[Seen]:
    return [
        Seen((topic, partition, o), f"{topic}-{partition}-{o}", 1_000 + o, 2_000) for o in offsets
    ]


def _records(*groups: list[Seen]) -> list[Any]:
    """The records of one outcome per group of events, as `fact_records` writes them."""
    return [
        record
        for events in groups
        for record in fact_records(
            "hifi.audit",
            build_facts(
                "shop",
                "connector@h:1",
                Outcome.DELIVERED,
                events,
                reason=None,
                status=200,
                outcome_ms=9,
            ),
        )
    ]


def test_facts_of_one_origin_partition_become_one_record_that_reads_back_in_order() -> None:
    records = _records(_seen("a", 0, range(3)), _seen("a", 1, range(2)), _seen("a", 0, range(3, 5)))
    grouped = grouped_records(records)
    assert [key for _, key, _, _ in grouped] == [b"a/0", b"a/1"]
    (_, _, value, headers), (_, _, lone_value, lone_headers) = grouped
    assert (HDR_FACTS, b"2") in headers
    assert HDR_FACTS not in dict(lone_headers)  # a key's only fact is written as it was
    assert lone_value == records[1][2]
    facts = decode_facts(value, headers)
    assert [fact.slices[0].offsets for fact in facts] == [[0, 1, 2], [3, 4]]
    assert [f.fact_id for f in facts] == [
        decode_fact(r[2], r[3]).fact_id for r in (records[0], records[2])
    ]


def test_records_with_one_fact_each_are_left_as_they_are() -> None:
    records = _records(_seen("a", 0, range(2)), _seen("a", 1, range(2)))
    assert grouped_records(records) is records


def test_many_facts_in_one_record_read_back() -> None:
    """More than 15 facts: MessagePack's longer array header."""
    records = _records(*[_seen("a", 0, range(n, n + 1)) for n in range(40)])
    ((_, _, value, headers),) = grouped_records(records)
    assert [fact.slices[0].offsets for fact in decode_facts(value, headers)] == [
        [n] for n in range(40)
    ]


def test_a_reader_of_single_facts_refuses_a_group_as_undecodable() -> None:
    """A 1.3 auditor reads every record as one fact: a group is refused, counted, never misread."""
    ((_, _, value, headers),) = grouped_records(
        _records(_seen("a", 0, range(1)), _seen("a", 0, range(1, 2)))
    )
    with pytest.raises(FactRefused) as refused:
        decode_fact(value, headers)
    assert refused.value.reason is Refusal.UNDECODABLE


def test_a_group_whose_count_disagrees_or_holds_a_bad_fact_is_refused_whole() -> None:
    ((_, _, value, headers),) = grouped_records(
        _records(_seen("a", 0, range(1)), _seen("a", 0, range(1, 2)))
    )
    miscounted = [(name, b"3" if name == HDR_FACTS else v) for name, v in headers]
    with pytest.raises(FactRefused) as refused:
        decode_facts(value, miscounted)
    assert refused.value.reason is Refusal.INCONSISTENT
    with pytest.raises(FactRefused) as refused:
        decode_facts(b"\x92\x01\x02", [(HDR_FACTS, b"2")])  # two integers, not facts
    assert refused.value.reason is Refusal.UNDECODABLE
    with pytest.raises(FactRefused):
        decode_facts(b"\xc1", headers)  # not MessagePack


class Kafka:
    """A `RecordWriter` that keeps each call's records."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []

    async def send_all(self, records: Sequence[Any]) -> object:
        return await (await self.append_all(records))

    async def append_all(self, records: Sequence[Any]) -> Awaitable[object]:
        self.calls.append(list(records))
        return asyncio.sleep(0)


async def test_the_trail_writes_concurrent_outcomes_in_one_call_a_record_per_origin() -> None:
    kafka = Kafka()
    trail = AuditTrail(kafka, topic="hifi.audit", dest="shop", node="connector@h:1")
    outcomes = [_seen("a", 0, range(0, 2)), _seen("a", 1, range(0, 3)), _seen("a", 0, range(2, 4))]
    waits = [await trail.write(Outcome.DELIVERED, events, status=200) for events in outcomes]
    await asyncio.gather(*waits)
    ((p0, p1),) = kafka.calls
    assert [f.slices[0].offsets for f in decode_facts(p0[2], p0[3])] == [[0, 1], [2, 3]]
    assert [f.slices[0].offsets for f in decode_facts(p1[2], p1[3])] == [[0, 1, 2]]


def test_a_group_never_grows_past_its_bound_and_a_large_fact_stays_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = _records(*[_seen("a", 0, range(n * 10, n * 10 + 10)) for n in range(6)])
    one = max(len(value or b"") for _, _, value, _ in records)
    monkeypatch.setattr("hifi.audit.facts.GROUP_MAX_BYTES", 2 * one + 10)
    grouped = grouped_records(records)
    assert [dict(h).get(HDR_FACTS) for _, _, _, h in grouped] == [b"2", b"2", b"2"]
    assert all(len(value or b"") <= 2 * one + 10 for _, _, value, _ in grouped)
    offsets = [f.slices[0].offsets[0] for _, _, v, h in grouped for f in decode_facts(v, h)]
    assert offsets == [0, 10, 20, 30, 40, 50]
    monkeypatch.setattr("hifi.audit.facts.GROUP_MAX_BYTES", 10)
    assert grouped_records(records) == records  # each fact past the bound: each alone
