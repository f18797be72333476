"""Accepted facts (audit format 1.3): what the ingest service writes, how it reads, what an older auditor does."""

from __future__ import annotations

import msgspec
import pytest
from prometheus_client import REGISTRY

from hifi.audit import (
    FORMAT_MAJOR,
    HDR_FORMAT,
    MAX_EVENTS_PER_FACT,
    Fact,
    FactRefused,
    Refusal,
    Slice,
    decode_fact,
    encode_fact,
    facts,
)
from hifi.audit.accepted import AcceptedTrail, accepted_event, stream_dest
from hifi.vocabulary import Outcome
from tests.helpers import FakeKafka

# what an auditor of format 1.2 knows: every outcome but `accepted`
OUTCOMES_1_2 = {"delivered", "handed_off", "routed", "re_offered", "dead_lettered", "filtered"}


def _written(unique: str) -> float:
    labels = {"dest": stream_dest(unique), "outcome": "accepted"}
    return REGISTRY.get_sample_value("hifi_audit_events_total", labels) or 0.0


async def test_accepted_events_are_written_as_a_fact_naming_their_topic(unique: str) -> None:
    """Three events of one stream: one 1.3 fact named `topic:TOPIC`, keyed by its origin
    partition (`TOPIC/2`, hifi/audit/keys.py), with each event's
    origin, id, time and arrival, counted once the broker acknowledged it."""
    writer = FakeKafka()
    trail = AcceptedTrail(writer, topic="hifi.audit", node="ingest@h:7")
    events = [accepted_event(unique, 2, 40 + i, f"e{i}", 1_000 + i, 2_000) for i in range(3)]
    before = _written(unique)
    acknowledged = await trail.write(events, accepted_ms=2_050)
    assert _written(unique) == before  # counted once acknowledged, not when queued
    await acknowledged
    assert _written(unique) == before + 3
    ((topic, key, value, headers),) = writer.records
    assert (topic, key, headers) == (
        "hifi.audit",
        f"{unique}/2".encode(),
        [(HDR_FORMAT, b"1.4")],
    )
    fact = decode_fact(value, headers)
    assert (fact.outcome, fact.dest, fact.node, fact.outcome_ms) == (
        Outcome.ACCEPTED,
        f"topic:{unique}",
        "ingest@h:7",
        2_050,
    )
    assert fact.slices == [
        Slice(unique, 2, [40, 41, 42], ["e0", "e1", "e2"], [1_000, 1_001, 1_002], [2_000] * 3)
    ]


async def test_events_of_two_topics_make_a_fact_each_and_none_make_none() -> None:
    """A fact names one topic: events of two make two facts; no event writes nothing."""
    writer = FakeKafka()
    trail = AcceptedTrail(writer, topic="audit")
    events = [accepted_event("b", 0, 1, "x", 5, 5), accepted_event("a", 0, 1, "y", 5, 5)]
    await (await trail.write(events))
    facts = [decode_fact(value, headers) for _, _, value, headers in writer.records]
    assert sorted(f.dest for f in facts) == ["topic:a", "topic:b"]
    assert all(f.node.startswith("ingest@") for f in facts)
    await (await trail.write([]))
    assert len(writer.records) == 2


async def test_a_large_acceptance_is_split_into_facts_of_at_most_the_bound() -> None:
    """More events than one fact holds: several facts of one topic, none over the bound."""
    writer = FakeKafka()
    trail = AcceptedTrail(writer, topic="audit")
    n = MAX_EVENTS_PER_FACT + 5
    await (await trail.write([accepted_event("t", 0, i, None, 1, 1) for i in range(n)]))
    sizes = [decode_fact(v, h).events() for _, _, v, h in writer.records]
    assert sizes == [MAX_EVENTS_PER_FACT, 5]


def test_an_accepted_fact_with_events_of_another_topic_is_refused() -> None:
    """An accepted fact whose events are not of the topic its dest names is inconsistent."""
    part = Slice("other", 0, [1], ["a"], [1], [1])
    fact = Fact(
        FORMAT_MAJOR, 3, "f", "topic:clicks", "ingest@h:1", "accepted", None, None, 1, [part]
    )
    with pytest.raises(FactRefused) as refused:
        decode_fact(encode_fact(fact), [(HDR_FORMAT, b"1.3")])
    assert refused.value.reason is Refusal.INCONSISTENT


async def test_an_auditor_of_format_1_2_refuses_an_accepted_fact_as_an_unknown_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 1.2 reader (its vocabulary without `accepted`) decodes a 1.3 accepted fact, no field
    of it new, and refuses it as `unknown_outcome` with the outcome named: counted and logged
    by the auditor, never misread as a destination's outcome."""
    writer = FakeKafka()
    trail = AcceptedTrail(writer, topic="audit")
    await (await trail.write([accepted_event("clicks", 0, 1, "a", 1, 1)]))
    ((_, _, value, headers),) = writer.records
    monkeypatch.setattr(facts, "_OUTCOMES", OUTCOMES_1_2)
    with pytest.raises(FactRefused) as refused:
        decode_fact(value, headers)
    assert refused.value.reason is Refusal.UNKNOWN_OUTCOME
    assert "'accepted'" in str(refused.value)


def test_facts_of_older_formats_still_read() -> None:
    """A 1.0 fact (ten fields) and a 1.2 fact read under format 1.3 as they did."""
    part = Slice("orders", 0, [3], ["x"], [1], [2])
    v10 = msgspec.msgpack.encode(
        [1, 0, "f0", "shop", "connector@h:1", "delivered", None, 200, 9, [part]]
    )
    fact = decode_fact(v10, [(HDR_FORMAT, b"1.0")])
    assert (fact.minor, fact.batch, fact.dest, fact.slices) == (0, None, "shop", [part])
    v12 = Fact(1, 2, "f2", "shop", "connector@h:1", "delivered", None, 200, 9, [part], "b", 1)
    assert decode_fact(encode_fact(v12), [(HDR_FORMAT, b"1.2")]) == v12
