"""Facts count against the incarnation of the events they name, whatever the order in which a
member meets a broker's new records, and also when the audit topic itself started over.

A first run of a member counts ten events of partition `src/0`, delivered, and saves its
share. Then topics are deleted and created again (a fresh dev broker beside a kept archive, a
rebuilt cluster, an operator): the source partition, the audit topic or both, while the member
runs or while it is down. The second run's ten events are delivered too, and the member meets
their source records and their facts in either order. Every case must end with both runs'
events delivered and none missing.

The broker is a few lists here (`Broker`): a position beyond a partition's end fetches nothing,
as on Tansu, and the worker then says the partition started over (`hifi.worker.restarts`, its
own tests), as it does for a position beyond the end on Kafka, and for a position on a record
the member read before (`rereads`) that the end is not past.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition

from auditor.accounts import Accounts
from auditor.archive import Archive
from config.destination import Destination
from hifi.accounting.buckets import MINUTE_MS
from hifi.audit import Seen, build_facts, fact_records
from hifi.vocabulary import Outcome
from tests.auditor.support import audited_destination, group_member
from tests.auditor.test_ledger import T0

TOPIC, AUDIT = "src", "audit"
P0, P1, AUDIT0 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(AUDIT, 0)
ALL = {P0, P1, AUDIT0}
T1 = T0 + 3 * MINUTE_MS  # the second run's minute
EVENTS = 10


@dataclass
class Broker:
    """The partitions' records, and the member's consumer over them."""

    logs: dict[TopicPartition, list[Any]] = field(default_factory=dict)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    rereads: set[TopicPartition] = field(default_factory=set)

    def recreate(self, tp: TopicPartition) -> None:
        self.logs[tp] = []
        self.committed.pop(tp, None)

    def join(self, member: Accounts) -> None:
        """Assign every partition: committed offsets, then the handler's own positions."""
        self.positions = {tp: self.committed.get(tp, 0) for tp in ALL}
        self.positions.update(member.assigned(ALL))
        self.rereads = member.rereads()
        member.held(ALL)

    def poll(self, member: Accounts, tp: TopicPartition) -> None:
        """One fetch of `tp` taken in, as the worker does."""
        log, position = self.logs.get(tp, []), self.positions[tp]
        if position > len(log) or (tp in self.rereads and position == len(log)):
            member.started_over(tp)  # the end is below the position: the worker says so
            self.positions[tp] = 0
            self.rereads.discard(tp)
            return
        self.rereads.discard(tp)
        records = log[position:]
        if not records:
            return
        again_from = member.take(tp, records)
        self.positions[tp] = records[-1].offset + 1 if again_from is None else again_from

    def commit(self, tp: TopicPartition) -> None:
        self.committed[tp] = self.positions[tp]


def _sources(broker: Broker, start: int, minute_ms: int, run: str) -> None:
    log = broker.logs.setdefault(P0, [])
    for n in range(EVENTS):
        offset = len(log)
        body = {"id": f"{run}-{n}", "event_time": minute_ms + 100 * n}
        log.append(
            SimpleNamespace(
                topic=TOPIC,
                partition=0,
                offset=offset,
                key=None,
                value=orjson.dumps(body),
                headers=[],
                timestamp=minute_ms + 100 * n + 1,
            )
        )
    assert log[-1].offset == start + EVENTS - 1


def _facts(broker: Broker, first_offset: int, minute_ms: int, run: str) -> None:
    """Two facts delivering the run's events (origin offsets from `first_offset`)."""
    log = broker.logs.setdefault(AUDIT0, [])
    for half in (range(0, EVENTS // 2), range(EVENTS // 2, EVENTS)):
        seen = [
            Seen(
                (TOPIC, 0, first_offset + n),
                f"{run}-{n}",
                minute_ms + 100 * n,
                minute_ms + 100 * n + 20,  # taken in after it was written
            )
            for n in half
        ]
        facts = build_facts(
            "d",
            "connector@h:1",
            Outcome.DELIVERED,
            seen,
            reason=None,
            status=200,
            outcome_ms=minute_ms + 2_000 + half.start,
        )
        for _, key, value, headers in fact_records(AUDIT, facts):
            log.append(
                SimpleNamespace(
                    topic=AUDIT,
                    partition=0,
                    offset=len(log),
                    key=key,
                    value=value,
                    headers=headers,
                    timestamp=minute_ms + 2_000 + half.start + len(log),
                )
            )


def _member(dest: Destination, root: Path, now_ms: int) -> Accounts:
    ends = lambda tp: None  # noqa: E731 - no fetch answered: the worst case for the member
    return group_member(
        dest, Archive(root), audit_topic=AUDIT, now_ms=now_ms, roll_s=0.0, highwater=ends
    )


async def _roll(member: Accounts, broker: Broker) -> None:
    work = member.next_work(poll_open=False)
    if work is not None:
        await work.job
    for tp in ALL:
        broker.commit(tp)
    member.after_commit({})


def _delivered(member: Accounts, minute_ms: int) -> tuple[int, int]:
    """The minute's (entered, delivered) as the share counts them."""
    ledger = member.shares[P0].ledgers["d"]
    bucket = ledger.buckets[minute_ms]
    counts = ledger.tally(bucket)
    return counts.entered, counts.delivered


async def _first_run(dest: Destination, root: Path, broker: Broker) -> Accounts:
    member = _member(dest, root, T0 + 30_000)
    broker.join(member)
    _sources(broker, 0, T0, "one")
    _facts(broker, 0, T0, "one")
    broker.poll(member, P0)
    broker.poll(member, AUDIT0)
    await _roll(member, broker)
    assert _delivered(member, T0) == (EVENTS, EVENTS)
    return member


ORDERS = ["facts_first", "source_first"]
WHAT = ["source", "audit", "both"]


async def _second_run(member: Accounts, broker: Broker, order: str, source_from: int) -> None:
    """The second run's events and facts, met in `order`."""
    _sources(broker, source_from, T1, "two")
    _facts(broker, source_from, T1, "two")
    polls = [AUDIT0, P0] if order == "facts_first" else [P0, AUDIT0]
    for _ in range(3):  # a partition that starts over is read again from 0 at the next poll
        for tp in polls:  # each poll's facts applied before the next poll
            broker.poll(member, tp)
            await _roll(member, broker)
    assert _delivered(member, T1) == (EVENTS, EVENTS)
    assert _delivered(member, T0) == (EVENTS, EVENTS)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("what", WHAT)
async def test_topics_created_again_while_the_member_runs(
    catalog_dir: Path, tmp_path: Path, what: str, order: str
) -> None:
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC)
    broker = Broker()
    member = await _first_run(dest, tmp_path / "archive", broker)
    source_from = EVENTS
    if what in ("source", "both"):
        broker.recreate(P0)
        source_from = 0
    if what in ("audit", "both"):
        broker.recreate(AUDIT0)
    for tp in (P0, AUDIT0):  # the worker sees an end below what it read: started over
        broker.poll(member, tp)
    await _second_run(member, broker, order, source_from)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("what", WHAT)
@pytest.mark.parametrize("new", ["shorter", "ends_at_check", "longer"])
async def test_topics_created_again_while_the_member_is_down(
    catalog_dir: Path, tmp_path: Path, what: str, order: str, new: str
) -> None:
    """`both` is a fresh broker beside the kept archive (`make demo` twice). `longer`: the new
    topics hold more records than the old ones had when the member reads them, so no position
    is beyond an end: only the records themselves tell. `ends_at_check`: the new audit topic
    ends at the record the member reads again to check it (the same number of facts as the
    old one, less one): nothing is beyond its end, and there is no record to look at."""
    longer = new == "longer"
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC)
    broker = Broker()
    await _first_run(dest, tmp_path / "archive", broker)
    source_from = EVENTS
    if what in ("source", "both"):
        broker.recreate(P0)
        source_from = 0
    if what in ("audit", "both"):
        broker.recreate(AUDIT0)
        if new == "ends_at_check":  # one record that is no fact: the end at the check offset
            junk = SimpleNamespace(
                topic=AUDIT, partition=0, offset=0, key=None, value=b"?", headers=[], timestamp=1
            )
            broker.logs[AUDIT0].append(junk)
    if longer:  # records of another run before this one: the new topics are past the old ends
        _sources(broker, source_from, T1 - MINUTE_MS, "between")
        _facts(broker, source_from, T1 - MINUTE_MS, "between")
        source_from += EVENTS
    restarted = _member(dest, tmp_path / "archive", T1 + 30_000)
    broker.join(restarted)
    await _second_run(restarted, broker, order, source_from)
    if longer:
        assert _delivered(restarted, T1 - MINUTE_MS) == (EVENTS, EVENTS)
