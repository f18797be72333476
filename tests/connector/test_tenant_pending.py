"""Per-tenant queues: batches never mix tenants, full ones first, then the oldest; what leaves HTTP and why."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from config.destination import Destination
from connector.handler import DeliveryHandler
from connector.linger import EVERY_S, LingerSchedule
from connector.rate_limits import RateLimits
from connector.rebatch import Batch
from connector.tenant_pending import OLDEST_WAIT_MAX_MS, TenantPending
from hifi.vocabulary import Outcome, Reason
from tenants.route import Route
from tests.tenants.support import route_of, tenant_events, write_tenant_destination

VALUES = {"api_key": "k", "region": "eu"}


@pytest.fixture
def dest(catalog_dir: Path) -> Destination:
    return write_tenant_destination(catalog_dir, "tv", "https://c.test/{region}/{tenant}", "t")


def _pending(routes: dict[str, Route], max_records: int = 3) -> TenantPending:
    return TenantPending(
        routes.get, tenant_field="customer", max_records=max_records, max_bytes=1 << 20
    )


def _routes(dest: Destination, **entries: dict[str, Any]) -> dict[str, Route]:
    return {
        tenant: route_of(dest, tenant, values=VALUES, **keys) for tenant, keys in entries.items()
    }


def _cut(pending: TenantPending, *, crowded: bool = False) -> Batch:
    """The next batch, which the test knows is due."""
    batch = pending.next_batch(crowded=crowded)
    assert batch is not None
    return batch


def _drain(pending: TenantPending) -> list[Batch]:
    batches = []
    while len(pending):
        assert pending.next_diversion() is None
        batches.append(_cut(pending))
    return batches


def test_batches_are_cut_per_tenant(dest: Destination) -> None:
    """Events of different tenants never share a batch; each batch goes to its tenant's url;
    a full batch is cut first, then the tenant that waited longest, and order is kept."""
    routes = _routes(dest, a={}, b={}, c={})
    pending = _pending(routes)
    events = tenant_events(["b", "a", "b", "c", "a", "a", "a", "b"])
    pending.extend(events)
    assert len(pending) == 8
    assert pending.fills_a_batch()  # a has three
    batches = _drain(pending)
    assert [
        (batch.target.name if batch.target else None, [e.id for e in batch.events])
        for batch in batches
    ] == [
        ("a", ["e1", "e4", "e5"]),
        ("b", ["e0", "e2", "e7"]),
        ("c", ["e3"]),
        ("a", ["e6"]),
    ]
    assert [batch.full for batch in batches] == [True, True, False, False]  # cut at a bound
    assert batches[0].target is routes["a"]
    assert pending.size_bytes == 0
    assert not pending.fills_a_batch()


def test_a_crowded_buffer_cuts_the_longest_queue_unless_the_oldest_waited_too_long(
    dest: Destination,
) -> None:
    """Under a backlog the tenant with the most events waiting goes first (a long tail of tenants
    shares the buffer in large batches); one that waited `OLDEST_WAIT_MAX_MS` goes before it;
    without a backlog the oldest goes first. The bytes held are counted as events come and go."""
    routes = _routes(dest, a={}, b={}, c={})
    pending = _pending(routes, max_records=10)
    now_ms = int(time.time() * 1000)
    pending.extend(tenant_events(["a", "b", "b", "c", "b", "c"], taken_ms=now_ms))
    sizes = [len(e.value) + 1 for e in tenant_events(["a", "b", "b", "c", "b", "c"])]
    assert pending.size_bytes == sum(sizes)
    assert [e.id for e in _cut(pending, crowded=True).events] == ["e1", "e2", "e4"]
    assert pending.size_bytes == sum(sizes) - sizes[1] - sizes[2] - sizes[4]
    assert [e.id for e in _cut(pending).events] == ["e0"]  # the oldest
    stale = now_ms - OLDEST_WAIT_MAX_MS - 1
    pending.extend(tenant_events(["a"], start=10, taken_ms=stale))
    pending.extend(tenant_events(["b", "b", "b"], start=11, taken_ms=now_ms))
    # c (two events) is older than a's queue, which is older than b's: none waited too long yet
    assert [e.id for e in _cut(pending, crowded=True).events] == ["e11", "e12", "e13"]
    assert [e.id for e in _cut(pending, crowded=True).events] == ["e3", "e5"]
    pending.extend(tenant_events(["b", "b"], start=20, taken_ms=now_ms))
    assert [e.id for e in _cut(pending, crowded=True).events] == ["e10"]  # waited too long
    assert [e.id for e in _cut(pending, crowded=True).events] == ["e20", "e21"]
    assert (len(pending), pending.size_bytes) == (0, 0)


def test_what_leaves_the_http_path(dest: Destination) -> None:
    """No tenant: dead letter (unknown_tenant); no entry: to the retrier with the cause
    unknown_tenant; disabled: dead letter (tenant_disabled) or filtered when the entry says so;
    dropped by a filter: filtered. Integer tenants are looked up by their digits."""
    routes = _routes(
        dest,
        on={},
        off={"enabled": False},
        hush={"enabled": False, "when_disabled": "filter"},
        picky={"filter": {"field": "type", "in": ["play"]}},
        **{"42": {}},
    )
    pending = _pending(routes, max_records=100)
    tenants: list[Any] = [..., "", None, [1], True, "nobody", "nobody2", "off", "hush", "on", 42]
    pending.extend(tenant_events(tenants, type="stop"))
    pending.extend(tenant_events(["picky", "picky"], start=100, type="play"))
    pending.extend(tenant_events(["picky"], start=200, type="stop"))
    diverted = []
    while (diversion := pending.next_diversion()) is not None:
        diverted.append(diversion)
    found = [(d.outcome, d.reason, [e.id for e in d.events]) for d in diverted]
    assert found == [
        (Outcome.DEAD_LETTERED, Reason.UNKNOWN_TENANT, ["e0", "e1", "e2", "e3", "e4"]),
        (Outcome.HANDED_OFF, Reason.UNKNOWN_TENANT, ["e5", "e6"]),
        (Outcome.DEAD_LETTERED, Reason.TENANT_DISABLED, ["e7"]),
        (Outcome.FILTERED, None, ["e8"]),
        (Outcome.FILTERED, None, ["e200"]),
    ]
    assert diverted[0].error == (
        "no tenant: field 'customer' is missing, empty, or not a string or an integer"
    )
    assert diverted[1].error.startswith("no entry for tenant 'nobody' and 1 other tenants;")
    assert diverted[2].error == "tenant 'off' is disabled"
    batches = _drain(pending)
    assert sorted((b.target.name, [e.id for e in b.events]) for b in batches if b.target) == [
        ("42", ["e10"]),
        ("on", ["e9"]),
        ("picky", ["e100", "e101"]),
    ]


def test_projected_bodies_travel_with_their_events(dest: Destination) -> None:
    """A projecting tenant's batch carries the projected bodies, halves too; the events keep
    their original values (for hand-offs and dead letters)."""
    routes = _routes(dest, p={"project": {"keep": ["type"]}})
    pending = _pending(routes, max_records=10)
    events = tenant_events(["p", "p"], type="play", extra="x" * 50)
    pending.extend(events)
    (batch,) = _drain(pending)
    assert list(batch.values()) == [b'{"id":"e0","type":"play"}', b'{"id":"e1","type":"play"}']
    first, second = batch.halves()
    assert list(first.values()) == [b'{"id":"e0","type":"play"}']
    assert (first.target, second.target) == (routes["p"], routes["p"])
    assert b"extra" in batch.events[0].value


def test_a_changed_entry_starts_a_new_batch(dest: Destination) -> None:
    """Events taken in under two versions of a tenant's entry never share a request."""
    routes = _routes(dest, a={})
    pending = _pending(routes, max_records=10)
    pending.extend(tenant_events(["a"]))
    routes["a"] = route_of(dest, "a", values={"api_key": "k2", "region": "eu"})
    pending.extend(tenant_events(["a"], start=1))
    batches = _drain(pending)
    assert [[e.id for e in b.events] for b in batches] == [["e0"], ["e1"]]
    assert batches[1].target is not None
    assert batches[1].target.headers["X-Api-Key"] == "k2"


def test_revoked_partitions_are_forgotten(dest: Destination) -> None:
    """`drop` forgets queued and set-apart events of the revoked partitions only."""
    routes = _routes(dest, a={})
    pending = _pending(routes, max_records=10)
    pending.extend(tenant_events(["a", "zz"], partition=0))
    pending.extend(tenant_events(["a", "zz"], partition=1, start=10))
    pending.drop({TopicPartition("src", 0)})
    assert len(pending) == 2
    diversion = pending.next_diversion()
    assert diversion is not None
    assert [e.id for e in diversion.events] == ["e11"]
    assert [[e.id for e in b.events] for b in _drain(pending)] == [["e10"]]


def test_the_linger_followed_is_the_schedules_and_it_is_told_how_late_each_cut_came(
    dest: Destination,
) -> None:
    """With an adapting linger (`connector.linger`), a queue is held by the linger it reads now,
    and each lingering cut reports how long past that linger it came."""
    clock = {"now_s": 0.0}
    schedule = LingerSchedule(0.1, 0.5, now_s=lambda: clock["now_s"])
    schedule.linger_s = 0.4  # the round came late: lingering longer
    pending = TenantPending(
        _routes(dest, a={}).get,
        tenant_field="customer",
        max_records=3,
        max_bytes=1 << 20,
        linger=schedule,
    )
    pending.extend(tenant_events(["a"], taken_ms=int(time.time() * 1000) - 250))
    assert pending.next_batch() is None  # 250 ms waited of the 400 the schedule says now
    schedule.linger_s = 0.1
    assert [e.id for e in _cut(pending).events] == ["e0"]
    clock["now_s"] += EVERY_S
    schedule.linger_ms()  # a second on: the schedule reads how late its one cut came
    assert 0.15 <= schedule.overdue_s < 1.0  # 250 ms waited, 100 of them the linger


def test_a_tenant_lingers_until_its_batch_fills_or_its_time_is_up(dest: Destination) -> None:
    """While the connector keeps up, a queue short of a full batch waits `max_linger_s` from its
    first event; a full one goes at once; a breaker's probe (`linger=False`) does not wait.
    Once the oldest queue is due it goes first, whole, and the next lingers again."""
    routes = _routes(dest, a={}, b={})
    pending = TenantPending(
        routes.get, tenant_field="customer", max_records=3, max_bytes=1 << 20, max_linger_s=0.2
    )
    now_ms = int(time.time() * 1000)
    pending.extend(tenant_events(["a", "b"], taken_ms=now_ms - 50))
    assert pending.next_batch() is None  # both waited 50 ms of their 200
    probe = pending.next_batch(max_records=1, linger=False)
    assert probe is not None
    assert [e.id for e in probe.events] == ["e0"]
    pending.extend(tenant_events(["b", "b"], start=10, taken_ms=now_ms))
    assert [e.id for e in _cut(pending).events] == ["e1", "e10", "e11"]  # full: at once
    pending.extend(tenant_events(["a"], start=20, taken_ms=now_ms - 250))
    pending.extend(tenant_events(["b"], start=30, taken_ms=now_ms))
    assert [e.id for e in _cut(pending).events] == ["e20"]  # waited 250 ms: due
    assert pending.next_batch() is None  # b's first event has just arrived
    assert [e.id for e in _cut(pending, crowded=True).events] == ["e30"]  # behind: no linger
    assert len(pending) == 0


def _records(events: list[Any], start: int = 0) -> list[ConsumerRecord[Any, Any]]:
    now_ms = int(time.time() * 1000)
    return [
        ConsumerRecord("src", 0, start + offset, now_ms, 0, None, event.value, None, 3, 0, ())
        for offset, event in enumerate(events)
    ]


def test_the_connector_cuts_the_longest_queue_only_while_it_is_behind(
    catalog_dir: Path,
) -> None:
    """A tenant destination's intake has room for `[lookups]` `buffer_records` (not the plain
    two windows of in-flight batches). A half-full buffer is not a backlog: the tenant that
    waited longest goes first. Three quarters full is: the tenant with most events waiting goes
    first, until the buffer falls below a quarter of its limit."""
    dest = write_tenant_destination(
        catalog_dir,
        "tv",
        "https://c.test/{region}/{tenant}",
        "src",
        lookups="buffer_records = 1000\nmax_linger_s = 0.0\n",
        extra="max_in_flight = 1\nmax_batch_records = 100\n",
    )
    tenants = ["old", "big"] + [f"t{i}" for i in range(100)]
    routes = _routes(dest, **{tenant: {} for tenant in tenants})
    deliverer = Mock(rate_limits=RateLimits(dest))  # no limits: nothing is held back
    delivery = DeliveryHandler(dest, deliverer, Mock(), route_of=routes.get)
    assert delivery.room() == 1000  # the plain buffer would be 1 x 100 x 2
    tp = TopicPartition("src", 0)

    def next_offsets() -> list[int]:
        work = delivery.next_work(poll_open=False)
        assert work is not None
        work.job.close()  # not run: only its events matter here
        return list(work.offsets[tp])

    half = ["old"] + ["big"] * 99 + [f"t{i}" for i in range(50) for _ in range(8)]
    delivery.take(tp, _records(tenant_events(half)))
    assert delivery.room() == 500
    assert next_offsets() == [0]  # keeping up: old's, the longest waiting
    rest = [f"t{i}" for i in range(50, 100) for _ in range(5)] + ["old"]
    delivery.take(tp, _records(tenant_events(rest, start=500), start=500))
    assert delivery.room() == 250  # three quarters full: behind
    assert next_offsets() == list(range(1, 100))  # big's, the longest
    for _ in range(50):  # behind until under a quarter: the 8-event queues first
        assert len(next_offsets()) == 8
    assert next_offsets() == list(range(500, 505))  # still behind: 251 events held
    assert next_offsets() == list(range(505, 510))  # under a quarter: caught up, t51's
    delivery.take(tp, _records(tenant_events(["big"] * 9, start=800), start=800))
    assert next_offsets() == list(range(510, 515))  # t52's waited longest; big's is longer


@pytest.mark.parametrize(("in_flight", "limit_kib"), [("", 1024), ("max_in_flight = 96\n", 1536)])
def test_a_tenant_buffer_holds_buffer_bytes_or_a_window_of_full_batches(
    catalog_dir: Path, in_flight: str, limit_kib: int
) -> None:
    """The bytes a tenant destination holds are `buffer_bytes`, or one window of `max_in_flight`
    full batches when that is more: its default of 64 in flight does not raise them (here a
    window of 64 batches of 16 KiB is the buffer's 1 MiB; of 96, 1.5 MiB)."""
    dest = write_tenant_destination(
        catalog_dir,
        "tv",
        "https://c.test/{region}/{tenant}",
        "src",
        lookups="buffer_bytes = 1048576\n",
        extra=f"max_batch_bytes = 16384\n{in_flight}",
    )
    routes = _routes(dest, a={})
    delivery = DeliveryHandler(
        dest, Mock(rate_limits=RateLimits(dest)), Mock(), route_of=routes.get
    )
    tp, taken, held = TopicPartition("src", 0), 0, 0
    while delivery.room() > 0:
        events = tenant_events(["a"] * 16, start=taken, pad="x" * 1000)
        delivery.take(tp, _records(events, start=taken))
        taken, held = taken + 16, held + sum(len(event.value) for event in events)
    assert limit_kib * 1024 <= held < limit_kib * 1024 + 16 * 1100


def test_records_waiting_in_kafka_are_a_backlog_too(catalog_dir: Path) -> None:
    """An intake that holds the connector back leaves its buffer far from full, with records
    waiting in Kafka: more than a window of requests (`max_in_flight` full batches) past the
    records taken in is a backlog (the longest queue first), until less than a quarter of a
    window waits and the buffer is under a quarter of its limit."""
    dest = write_tenant_destination(
        catalog_dir,
        "tv",
        "https://c.test/{region}/{tenant}",
        "src",
        lookups="buffer_records = 1000\nmax_linger_s = 0.0\n",
        extra="max_in_flight = 2\nmax_batch_records = 100\n",
    )
    routes = _routes(dest, old={}, big={})
    deliverer = Mock(rate_limits=RateLimits(dest))
    tp = TopicPartition("src", 0)
    highwaters = {tp: 0}
    delivery = DeliveryHandler(
        dest, deliverer, Mock(), route_of=routes.get, highwater=highwaters.get
    )

    def next_tenant() -> str:
        work = delivery.next_work(poll_open=False)
        assert work is not None
        work.job.close()
        return "old" if 0 in work.offsets[tp] or 10 in work.offsets[tp] else "big"

    events = tenant_events(["old"] + ["big"] * 9)
    highwaters[tp] = 10 + 200  # a window (2 x 100) waits past the ten taken in
    delivery.take(tp, _records(events))
    assert next_tenant() == "big"  # behind: the longest queue, though old's waited longer
    highwaters[tp] = 11 + 49  # under a quarter of a window waits: caught up
    delivery.take(tp, _records(tenant_events(["old", "big"], start=10), start=10))
    assert next_tenant() == "old"  # keeping up: the queue that waited longest


def test_the_longest_queue_is_found_as_a_scan_would_find_it(dest: Destination) -> None:
    """Crowded, the queue cut is the one a scan of every queue picks (the most events; among
    equals, the one that waited longest), through random growth, cuts, partial cuts and
    drops: the choice is kept without scanning a thousand queues per batch."""
    rng = random.Random(29)
    tenants = [f"t{i}" for i in range(40)]
    routes = _routes(dest, **{tenant: {} for tenant in tenants})
    pending = _pending(routes, max_records=7)
    now_ms = int(time.time() * 1000)
    start = 0
    for step in range(400):
        drawn = [rng.choice(tenants[: rng.randint(1, 40)]) for _ in range(rng.randint(1, 30))]
        pending.extend(tenant_events(drawn, start=start, taken_ms=now_ms, partition=step % 3))
        start += len(drawn)
        for _ in range(rng.randint(0, 3)):
            if not len(pending):
                break
            queues = list(pending._queues.values())
            longest = max(queues, key=len)
            assert pending._longest() is longest
            chosen = pending._queues[next(iter(pending._full))] if pending._full else longest
            expected = list(chosen[: pending.max_records])
            assert _cut(pending, crowded=True).events == expected
        if step % 50 == 49:
            pending.drop({TopicPartition("src", step % 3)})
        if step % 50 == 24 and len(pending):  # a cut while keeping up: the heap is let go
            pending.next_batch(crowded=False, linger=False)
            assert pending._by_length is None
    assert pending._by_length is None or len(pending._by_length) <= 2 * len(pending._queues) + 4096


def test_full_queues_take_turns(dest: Destination) -> None:
    """A tenant whose queue stays full after a cut goes behind the other full queues, so one
    busy tenant cannot keep the others waiting for a whole backlog."""
    routes = _routes(dest, a={}, b={})
    pending = _pending(routes, max_records=2)
    pending.extend(tenant_events(["a"] * 6 + ["b"] * 4))
    cut = [_cut(pending, crowded=True).target for _ in range(5)]
    assert [route.name if route else None for route in cut] == ["a", "b", "a", "b", "a"]
