"""The connector's audit facts per outcome, in the order they are written, with a fake producer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import httpx
import orjson
import pytest
import respx
from aiokafka import ConsumerRecord, TopicPartition

from config.destination import Destination
from connector.delivery import Deliverer
from connector.divert import DLQ_RECORD_MAX_BYTES, Diverter, Unreadable
from connector.handler import DeliveryHandler
from connector.rebatch import Batch
from connector.sender import HttpxSender
from hifi.audit import AuditTrail, Fact, Seen, Slice, decode_facts, slices_of
from hifi.envelope import Event, parse_records
from hifi.errors import BrokerUnavailable
from hifi.vocabulary import Reason
from tests.helpers import TAKEN_MS, FakeKafka, Sleeps, make_destination, make_event
from tests.tenants.support import route_of, tenant_events, write_tenant_destination

URL = "https://collector.test/v1/events"
AUDIT = "audit.unit"


@pytest.fixture
def dest(catalog_dir: Path) -> Destination:
    return make_destination(catalog_dir, "unit", URL, "src", local_retry_attempts=2)


def _trail(kafka: FakeKafka) -> AuditTrail:
    return AuditTrail(kafka, topic=AUDIT, dest="unit", node="connector@test:1")


def _deliverer(dest: Destination, kafka: FakeKafka) -> tuple[Deliverer, httpx.AsyncClient]:
    client, trail = httpx.AsyncClient(), _trail(kafka)
    diverter = Diverter(kafka, dest, trail=trail)
    return Deliverer(
        HttpxSender(client, timeout_s=dest.request_timeout_s),
        dest,
        diverter,
        sleep=Sleeps(),
        trail=trail,
    ), client


def _facts(kafka: FakeKafka) -> list[Fact]:
    return [
        fact
        for topic, _, value, headers in kafka.records
        if topic == AUDIT
        for fact in decode_facts(value, headers)
    ]


def _named(fact: Fact) -> list[tuple[str, int, int, str | None]]:
    """(topic, partition, offset, id) of every event a fact names."""
    return [
        (part.topic, part.partition, offset, event_id)
        for part in fact.slices
        for offset, event_id in zip(part.offsets, part.ids, strict=True)
    ]


def _rejecting(ids: set[str]) -> respx.Route:
    def answer(request: httpx.Request) -> httpx.Response:
        sent = {event["id"] for event in orjson.loads(request.content)}
        return httpx.Response(400 if sent & ids else 200)

    return respx.post(URL).mock(side_effect=answer)


@respx.mock
async def test_each_outcome_of_a_bisected_batch_is_one_fact_after_its_write(
    dest: Destination,
) -> None:
    """A batch with one rejected event: a dead_lettered fact (reason, status) follows the DLQ
    write, and each accepted half has its delivered fact with the 2xx status, ids and times."""
    _rejecting({"e3"})
    kafka = FakeKafka()
    deliverer, client = _deliverer(dest, kafka)
    async with client:
        await deliverer.deliver(Batch([make_event(i) for i in range(4)]))
    written: list[str] = []
    for topic, _, value, headers in kafka.records:
        written += [f.outcome for f in decode_facts(value, headers)] if topic == AUDIT else [topic]
    assert written.index("unit.dlq") + 1 == written.index("dead_lettered")
    facts = _facts(kafka)
    dead = [fact for fact in facts if fact.outcome == "dead_lettered"]
    delivered = [fact for fact in facts if fact.outcome == "delivered"]
    assert [(f.reason, f.status, _named(f)) for f in dead] == [
        ("http_4xx", 400, [("src", 0, 3, "e3")])
    ]
    assert sorted(e for f in delivered for e in _named(f)) == [
        ("src", 0, i, f"e{i}") for i in range(3)
    ]
    assert {(f.status, f.reason, f.dest) for f in delivered} == {(200, None, "unit")}
    assert {t for f in facts for part in f.slices for t in part.taken_ms} == {TAKEN_MS}


@respx.mock
async def test_a_hand_off_fact_follows_the_retry_in_write(dest: Destination) -> None:
    """Local attempts spent: the events go to NAME.retry_in, then one handed_off fact names them."""
    respx.post(URL).respond(503)
    kafka = FakeKafka()
    deliverer, client = _deliverer(dest, kafka)
    async with client:
        await deliverer.deliver(Batch([make_event(1), make_event(2)]))
    assert [topic for topic, *_ in kafka.records] == ["unit.retry_in"] * 2 + [AUDIT]
    (fact,) = _facts(kafka)
    assert (fact.outcome, fact.status, _named(fact)) == (
        "handed_off",
        503,
        [("src", 0, 1, "e1"), ("src", 0, 2, "e2")],
    )


@respx.mock
async def test_a_fact_kafka_refuses_fails_the_delivery(dest: Destination) -> None:
    """When the fact cannot be written the unit of work fails, so its offsets are not committed."""
    respx.post(URL).respond(200)
    deliverer, client = _deliverer(dest, FakeKafka(fail=True))
    async with client:
        with pytest.raises(BrokerUnavailable):
            await deliverer.deliver(Batch([make_event(1)]))


async def test_unreadable_records_are_accounted_by_origin_with_the_reason_written(
    dest: Destination,
) -> None:
    """Malformed records get dead_lettered facts without an id; one too big for a letter is cut
    and its fact says too_large, the reason its letter carries."""
    small = ConsumerRecord("src", 1, 40, 1234, 0, None, b"[1]", None, 0, 3, ())
    huge_value = b"x" * (DLQ_RECORD_MAX_BYTES + 1)
    huge = ConsumerRecord("src", 1, 41, 5678, 0, None, huge_value, None, 0, len(huge_value), ())
    kafka = FakeKafka()
    diverter = Diverter(kafka, dest, trail=_trail(kafka))
    await diverter.records_to_dlq(
        [
            Unreadable(small, Reason.MALFORMED, "value is JSON array", 111),
            Unreadable(huge, Reason.MALFORMED, "value is not JSON", 222),
        ]
    )
    by_reason = {fact.reason: fact for fact in _facts(kafka)}
    assert set(by_reason) == {"malformed", "too_large"}
    assert _named(by_reason["malformed"]) == [("src", 1, 40, None)]
    assert _named(by_reason["too_large"]) == [("src", 1, 41, None)]
    assert by_reason["too_large"].slices[0].event_times_ms == [5678]
    assert by_reason["too_large"].slices[0].taken_ms == [222]
    letters = {
        value[:3]: dict(headers)["hifi-reason"]
        for topic, _, value, headers in kafka.records
        if topic == "unit.dlq" and value
    }
    assert letters == {b"[1]": b"malformed", b"xxx": b"too_large"}


@respx.mock
async def test_without_a_trail_nothing_is_written_for_the_audit(dest: Destination) -> None:
    """No trail (`audit = false`): a delivery and a hand-off write nothing but the hand-off."""
    respx.post(URL).mock(side_effect=[httpx.Response(200), *[httpx.Response(503)] * 2])
    kafka = FakeKafka()
    async with httpx.AsyncClient() as client:
        deliverer = Deliverer(
            HttpxSender(client, timeout_s=dest.request_timeout_s),
            dest,
            Diverter(kafka, dest),
            sleep=Sleeps(),
        )
        await deliverer.deliver(Batch([make_event(1)]))
        await deliverer.deliver(Batch([make_event(2)]))
    assert [topic for topic, *_ in kafka.records] == ["unit.retry_in"]


def _records(topic: str, partition: int, offsets: range, *, with_ids: bool = True) -> list[Any]:
    out = []
    for offset in offsets:
        body: dict[str, Any] = {"t": 1_700_000_000_000 + offset}
        if with_ids and offset % 3:
            body["id"] = f"{topic}-{partition}-{offset}"
        value = orjson.dumps(body)
        out.append(
            ConsumerRecord(topic, partition, offset, 1, 0, None, value, None, 3, len(value), ())
        )
    return out


def test_the_columns_of_connector_events_match_the_event_by_event_reading() -> None:
    """The connector's fast path (a column per run of one partition) names the same events,
    ids, times and origins as the general one, across runs, repeated partitions, events
    without ids and events re-offered by the retrier (origin from their header)."""
    events = []
    for topic, partition, offsets in [
        ("a", 0, range(0, 5)),
        ("a", 1, range(10, 13)),
        ("a", 0, range(5, 9)),
    ]:
        events += parse_records(
            TopicPartition(topic, partition),
            _records(topic, partition, offsets),
            id_field="id",
            event_time_field="t",
            max_bytes=1 << 20,
            taken_ms=TAKEN_MS,
        ).events
    value = orjson.dumps({"id": "back", "t": 1_700_000_000_000})
    headers = [("hifi-origin", b"a/1/7"), ("hifi-attempt", b"1")]
    retried = ConsumerRecord(
        "unit.retry_out", 2, 40, 1, 0, None, value, None, 3, len(value), headers
    )
    events += parse_records(
        TopicPartition("unit.retry_out", 2),
        [retried],
        id_field="id",
        event_time_field="t",
        max_bytes=1 << 20,
        taken_ms=TAKEN_MS,
        retried=True,
    ).events
    assert type(events[0]) is Event

    fast = slices_of(events)
    plain = slices_of(
        [Seen(e.origin_parts, e.audit_id, e.event_time_ms, e.taken_ms) for e in events]
    )

    def rows(slices: list[Slice]) -> list[tuple[Any, ...]]:
        return sorted(
            (s.topic, s.partition, *row)
            for s in slices
            for row in zip(s.offsets, s.ids, s.event_times_ms, s.taken_ms, strict=True)
        )

    assert rows(fast) == rows(plain)
    assert len(rows(fast)) == 13
    assert ("a", 1, 7, "back", 1_700_000_000_000, TAKEN_MS) in rows(fast)
    assert ("a", 0, 0, None, 1_700_000_000_000, TAKEN_MS) in rows(fast)  # no id: by origin
    assert sorted((s.topic, s.partition) for s in fast) == [("a", 0), ("a", 1)]


class HeldAcks(FakeKafka):
    """A `FakeKafka` whose writes are acknowledged only once `acknowledge` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.acknowledge = asyncio.Event()
        self.acknowledged = 0

    async def append_all(self, records: Sequence[Any]) -> Awaitable[None]:
        self.records.extend(records)
        return self._acknowledged()

    async def _acknowledged(self) -> None:
        await self.acknowledge.wait()
        self.acknowledged += 1


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(10_000):  # loop turns, not time: the HTTP exchange is mocked
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


@respx.mock
async def test_a_full_batch_leaves_its_facts_acknowledgement_to_the_worker(
    dest: Destination,
) -> None:
    """A full batch's unit returns once the destination accepted it, with its facts'
    acknowledgement still to await (the worker awaits it after the unit gave up its slot);
    a partial batch's unit awaits it itself, so the events arriving meanwhile wait for the slot."""
    respx.post(URL).mock(return_value=httpx.Response(200))
    kafka = HeldAcks()
    deliverer, client = _deliverer(dest, kafka)
    delivery = DeliveryHandler(dest, deliverer, Mock())
    # the timeout bounds a unit that would await the held acknowledgement itself
    async with client, asyncio.timeout(30):
        acknowledged = await delivery._deliver(Batch([make_event(1)], full=True))
        assert acknowledged is not None
        await _until(lambda: len(_facts(kafka)) == 1, "the full batch's fact to be queued")
        assert [_named(fact) for fact in _facts(kafka)] == [[("src", 0, 1, "e1")]]
        assert kafka.acknowledged == 0
        kafka.acknowledge.set()
        await acknowledged
        assert kafka.acknowledged == 1

        kafka.acknowledge.clear()
        partial = asyncio.create_task(delivery._deliver(Batch([make_event(2)])))
        await _until(lambda: len(_facts(kafka)) == 2, "the partial batch's fact to be written")
        await asyncio.sleep(0)
        assert not partial.done()  # waits in its slot for the acknowledgement
        kafka.acknowledge.set()
        assert await partial is None
        assert kafka.acknowledged == 2


@respx.mock
async def test_a_tenant_destination_keeping_up_leaves_every_acknowledgement_to_the_worker(
    catalog_dir: Path,
) -> None:
    """A tenant destination that lingers (`max_linger_s`) fills its batches while they linger:
    while it keeps up, a partial batch's unit gives up its slot as a full one does."""
    dest = write_tenant_destination(
        catalog_dir, "tv", "https://c.test/{region}/{tenant}", "src", lookups="max_linger_s = 0.2\n"
    )
    routes = {"a": route_of(dest, "a", values={"api_key": "k", "region": "eu"})}
    respx.post("https://c.test/eu/a").mock(return_value=httpx.Response(200))
    kafka = HeldAcks()
    deliverer, client = _deliverer(dest, kafka)
    delivery = DeliveryHandler(dest, deliverer, Mock(), route_of=routes.get)
    async with client, asyncio.timeout(30):
        batch = Batch(tenant_events(["a"]), routes["a"])
        assert not batch.full
        acknowledged = await delivery._deliver(batch)
        assert acknowledged is not None  # not awaited in the slot
        assert kafka.acknowledged == 0
        kafka.acknowledge.set()
        await acknowledged
        assert kafka.acknowledged == 1
