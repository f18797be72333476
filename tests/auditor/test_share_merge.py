"""Two members' shares of a destination add up to what one auditor over both partitions counts.

Each member takes the facts of its share only (by key), an unsplit fact of before the split
contributes to each member only its own slices, and the destination's row summed over the
shares equals the single ledger's minute by minute: counts, lag percentiles, judgement.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from auditor.archive import Archive
from auditor.assignor import plan
from auditor.epochs import Epochs
from auditor.intake import Intake
from auditor.merged import DestinationView, share_entry
from auditor.progress import ProgressClock
from auditor.shares import Books, Share
from config.destination import Destination
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.incarnations import Incarnations
from hifi.accounting.ledger import Ledger
from hifi.accounting.tables import archive_row
from hifi.audit import (
    FORMAT_MAJOR,
    FORMAT_MINOR,
    HDR_FORMAT,
    Fact,
    Seen,
    Slice,
    build_facts,
    encode_fact,
    fact_records,
)
from hifi.audit.facts import grouped_records
from hifi.vocabulary import Outcome, Reason
from tests.auditor.support import audited_destination

T0 = 1_790_000_040_000 - 1_790_000_040_000 % MINUTE_MS
TOPIC = "src"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
AUDIT = "audit"
SETTLED_MS = T0 + 2 * MINUTE_MS + 2_000  # minutes T0 and T0+1 final (settle_s 1), fact ids kept
FIGURES = (
    "entered",
    "delivered",
    "dead_lettered",
    "dead_lettered_by_reason",
    "filtered",
    "in_retry",
    "missing",
    "duplicates",
    "lag_p50_ms",
    "lag_p95_ms",
    "lag_p99_ms",
    "lag_in_p95_ms",
    "process_p95_ms",
    "final",
    "up",
    "down_reason",
)


def _seen(tp: TopicPartition, offsets: range, minute_ms: int) -> list[Seen]:
    return [
        Seen(
            (tp.topic, tp.partition, o),
            f"{tp.partition}-{o}",
            minute_ms + 100 * o,
            minute_ms + 100 * o + 7,
        )
        for o in offsets
    ]


def _unsplit(events: list[Seen], outcome: Outcome, at_ms: int) -> Fact:
    """A fact as writers made them before the split: one fact, slices of both partitions."""
    parts: dict[tuple[str, int], Slice] = {}
    for e in events:
        topic, partition, offset = e.origin_parts
        part = parts.setdefault((topic, partition), Slice(topic, partition, [], [], [], []))
        part.offsets.append(offset)
        part.ids.append(e.audit_id)
        part.event_times_ms.append(e.event_time_ms)
        part.taken_ms.append(e.taken_ms)
    return Fact(
        FORMAT_MAJOR,
        FORMAT_MINOR,
        uuid.uuid4().hex,
        "d",
        "connector@h:1",
        str(outcome),
        None,
        200,
        at_ms,
        list(parts.values()),
    )


@functools.cache
def _records(grouped: bool = False) -> tuple[list[Any], list[Fact]]:
    """The audit partition's records: an unsplit fact (key `d`), then split ones; `grouped`:
    the split ones as a connector writes the facts of outcomes met together (format 1.4, one
    record per origin partition)."""
    early = _seen(P0, range(0, 5), T0) + _seen(P1, range(0, 4), T0)
    later = (
        _seen(P0, range(5, 9), T0)
        + _seen(P1, range(4, 9), T0)
        + _seen(P1, range(10, 14), T0 + MINUTE_MS)
    )
    dead = _seen(P0, range(10, 12), T0 + MINUTE_MS)
    handed = _seen(P0, range(12, 13), T0 + MINUTE_MS)
    facts = [_unsplit(early, Outcome.DELIVERED, T0 + 900)]
    values: list[Any] = [(AUDIT, b"d", encode_fact(facts[0]), [(HDR_FORMAT, b"1.3")])]
    for events, outcome, at_ms, reason in [
        (later, Outcome.DELIVERED, T0 + MINUTE_MS + 500, None),
        (dead, Outcome.DEAD_LETTERED, T0 + MINUTE_MS + 900, Reason.HTTP_4XX),
        (handed, Outcome.HANDED_OFF, T0 + MINUTE_MS + 900, None),
        (_seen(P1, range(0, 2), T0), Outcome.DELIVERED, T0 + MINUTE_MS + 800, None),  # duplicates
    ]:
        split = build_facts(
            "d", "connector@h:1", outcome, events, reason=reason, status=200, outcome_ms=at_ms
        )
        facts.extend(split)
        values.extend(fact_records(AUDIT, split))
    if grouped:
        values[1:] = grouped_records(values[1:])
        assert len(values) == 3  # the unsplit fact, then one record for each of P0 and P1
    records = [
        SimpleNamespace(
            topic=AUDIT, partition=0, offset=i, key=key, value=value, headers=headers, timestamp=i
        )
        for i, (_, key, value, headers) in enumerate(values)
    ]
    return records, facts


def _entries() -> dict[TopicPartition, dict[int, list[int]]]:
    """What entered each partition, by minute: offset 9 of each never gets an outcome (missing)."""
    return {
        P0: {T0: list(range(10)), T0 + MINUTE_MS: [10, 11, 12]},
        P1: {T0: list(range(10)), T0 + MINUTE_MS: list(range(10, 14))},
    }


def _member(
    dest: Destination, owned: list[TopicPartition], root: Path, *, grouped: bool = False
) -> dict[TopicPartition, Share]:
    """One member owning `owned`: entries noted, the audit partition's records taken, settled."""
    shares = {tp: Share.of(tp, [dest]) for tp in owned}
    now = lambda: SETTLED_MS  # noqa: E731
    incarnations = Incarnations()
    epochs = Epochs(incarnations, ProgressClock(lambda tp: None, now), now)
    intake = Intake(
        Books({dest.name: dest}, shares, Archive(root)),
        epochs=epochs,
        incarnations=incarnations,
        now_ms=now,
    )
    for tp, share in shares.items():
        for minute, offsets in _entries()[tp].items():
            share.ledgers["d"].enter(minute, (tp.topic, tp.partition), offsets)
    records, _ = _records(grouped)
    intake.facts(TopicPartition(AUDIT, 0), records)
    for share in shares.values():
        share.ledgers["d"].advance(SETTLED_MS)
    return shares


def share_entries(
    members: list[dict[TopicPartition, Share]],
) -> dict[TopicPartition, dict[str, Any]]:
    """Each share's board entry, as its member posts it at `SETTLED_MS`."""
    return {
        tp: {
            "member": "m",
            "progress_ms": SETTLED_MS,
            "dests": {
                "d": share_entry(s.ledgers["d"], horizon_ms=0, changed={}, now_ms=SETTLED_MS)
            },
        }
        for member in members
        for tp, s in member.items()
    }


def _merged(dest: Destination, members: list[dict[TopicPartition, Share]]) -> list[dict[str, Any]]:
    view = DestinationView(dest, [P0, P1])
    view.update(share_entries(members))
    return [
        {k: row[k] for k in FIGURES}
        for row in view.rows(from_ms=None, to_ms=None, now_ms=SETTLED_MS)
    ]


@pytest.mark.parametrize("grouped", [False, True], ids=["a fact a record", "grouped"])
def test_two_members_shares_sum_to_the_single_ledger_minute_by_minute(
    catalog_dir: Path, tmp_path: Path, grouped: bool
) -> None:
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC, lag_sla_s=1.0)
    first = _member(dest, [P0], tmp_path / "a", grouped=grouped)
    second = _member(dest, [P1], tmp_path / "b", grouped=grouped)
    both = _member(dest, [P0, P1], tmp_path / "c", grouped=grouped)

    single = Ledger("d", dest.accounting)  # one auditor over both partitions, as before shares
    for tp, by_minute in _entries().items():
        for minute, offsets in by_minute.items():
            single.enter(minute, (tp.topic, tp.partition), offsets)
    for fact in _records()[1]:
        single.apply(fact)
    single.advance(SETTLED_MS)
    expected = [
        {k: archive_row(single, b, written_ms=0)[k] for k in FIGURES} for b in single.rows()
    ]

    merged = _merged(dest, [first, second])
    assert merged == expected == _merged(dest, [both])
    assert [(r["entered"], r["delivered"], r["missing"], r["duplicates"]) for r in merged] == [
        (20, 18, 2, 2),
        (7, 4, 0, 0),
    ]
    assert merged[1]["dead_lettered_by_reason"] == {"http_4xx": 2}
    assert merged[1]["in_retry"] == 1
    # only the unsplit fact reached both members, each taking its own slice of it
    seen = first[P0].ledgers["d"].seen_facts.keys() & second[P1].ledgers["d"].seen_facts.keys()
    assert len(seen) == 1


def test_a_member_skips_the_facts_of_other_shares_by_key_and_applied_offsets(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """Split facts about another member's partition are not applied (not even decoded as its
    own); a poll read again after a rebalance applies nothing twice."""
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC)
    member = _member(dest, [P1], tmp_path)
    ledger = member[P1].ledgers["d"]
    assert {tp for tp in ledger.outcomes} == {(TOPIC, 1)}
    records, _ = _records()
    assert member[P1].audit_next == {0: len(records)}
    assert not member[P1].takes(0, len(records) - 1)


def test_the_plan_splits_source_partitions_and_gives_every_member_the_audit_topic() -> None:
    members = {
        "m-b": ["src", "other", AUDIT],
        "m-a": ["src", "other", AUDIT],
        "m-c": ["src", "other", AUDIT],
    }
    planned = plan(members, {"src": range(4), "other": range(3), AUDIT: range(4)}, {AUDIT})
    sources = [(t, p) for m in planned.values() for t, ps in m.items() if t != AUDIT for p in ps]
    assert sorted(sources) == sorted(
        [("src", p) for p in range(4)] + [("other", p) for p in range(3)]
    )
    assert len(sources) == len(set(sources))  # disjoint
    assert all(planned[m][AUDIT] == [0, 1, 2, 3] for m in members)
    assert sorted(len(ps) for m in planned.values() for t, ps in m.items() if t != AUDIT) != []
    assert max(sum(len(ps) for t, ps in m.items() if t != AUDIT) for m in planned.values()) == 3
