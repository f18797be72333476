"""A record's headers are read once: routing, the due and expiry decisions and the plan share one `RetryRecord`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition

import hifi.headers
from config.destination import Destination
from hifi.audit import Seen
from hifi.kafka.clients import Record
from hifi.vocabulary import Outcome
from retrier.daemon import _Routing
from retrier.record import RetryRecord
from retrier.tiers import RetryState, Source, tier_topic
from tests.helpers import make_destination
from tests.retrier.support import handoff


class _NoWrites:
    """A producer `take` never reaches: planning writes nothing."""

    async def send_all(self, records: Sequence[Record]) -> object:
        raise AssertionError("planning produced")

    async def append_all(self, records: Sequence[Record]) -> Any:
        raise AssertionError("planning produced")


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every reading of a record's headers into a map, wherever the retrier does it."""
    counted: list[int] = []
    header_map = hifi.headers.header_map

    def counting(headers: Any) -> dict[str, bytes]:
        counted.append(1)
        return header_map(headers)

    monkeypatch.setattr(hifi.headers, "header_map", counting)
    return counted


def _consumed(
    topic: str, offset: int, headers: list[tuple[str, bytes]]
) -> ConsumerRecord[Any, Any]:
    return ConsumerRecord(
        topic, 0, offset, int(time.time() * 1000), 0, b"k", b"{}", None, 1, 2, headers
    )


def _routing(dest: Destination) -> _Routing:
    sources = {dest.retry_in_topic: Source(dest, None), tier_topic(dest.name, 0): Source(dest, 0)}
    return _Routing(sources, _NoWrites(), lambda: None, 100, trails={})


async def test_each_record_is_read_once_on_its_way_through_the_plan(
    catalog_dir: Path, parses: list[int]
) -> None:
    """Ten hand-offs routed (tiers and expiries) are ten header reads; a tier partition read up
    to its first record not yet due (one expiring, three due) is one read per record up to and
    including that head."""
    dest = make_destination(
        catalog_dir,
        "d",
        "https://d.example/in",
        "src",
        retry_tiers_s=[60.0],
        max_retry_age_s=3600.0,
    )
    routing = _routing(dest)
    now_ms = int(time.time() * 1000)
    handoffs = [
        _consumed(
            dest.retry_in_topic, i, handoff(dest, f"e{i}", attempt=1 + i % 2, handoff_ms=now_ms)[3]
        )
        for i in range(10)
    ]
    assert routing.take(TopicPartition(dest.retry_in_topic, 0), handoffs) is None
    assert len(parses) == 10
    planned = routing._planned[dest.name]
    assert [item.outcome for item in planned] == [Outcome.ROUTED, Outcome.DEAD_LETTERED] * 5

    parses.clear()
    tier = tier_topic(dest.name, 0)
    due = [("hifi-due-ms", str(now_ms - 1000).encode())]
    later = [("hifi-due-ms", str(now_ms + 60_000).encode())]
    aged = handoff(dest, "old", attempt=1, handoff_ms=now_ms, first_failure_ms=now_ms - 7_200_000)
    waiting = [_consumed(tier, 0, [*aged[3], *due])]
    waiting += [_consumed(tier, i, [*handoffs[i].headers, *due]) for i in range(1, 4)]
    waiting += [_consumed(tier, 4, [*handoffs[4].headers, *later]), _consumed(tier, 5, due)]
    try:
        assert routing.take(TopicPartition(tier, 0), waiting) == 4
        assert len(parses) == 5
        outcomes = [item.outcome for item in routing._planned[dest.name][10:]]
        assert outcomes == [Outcome.DEAD_LETTERED, *[Outcome.RE_OFFERED] * 3]
    finally:
        routing.drop({TopicPartition(tier, 0)})


def _read(headers: dict[str, bytes], *, timestamp_ms: int = 999) -> RetryRecord:
    found = list(headers.items())
    return RetryRecord.read(
        ConsumerRecord("d.retry_in", 1, 9, timestamp_ms, 0, b"k", b"{}", None, 1, 2, found)
    )


def test_handoff_headers_with_fallbacks() -> None:
    """Hand-off headers are read as integers; missing or garbled ones fall back sensibly, a tier
    record without a due time is due at once (its own timestamp)."""
    full = {"hifi-attempt": b"3", "hifi-first-failure-ms": b"100", "hifi-handoff-ms": b"200"}
    assert _read(full).state == RetryState(attempt=3, first_failure_ms=100, handoff_ms=200)
    bare = _read({"hifi-attempt": b"x"})
    assert bare.state == RetryState(attempt=1, first_failure_ms=999, handoff_ms=999)
    assert _read({"hifi-attempt": b"0"}).state.attempt == 1
    assert _read({"hifi-due-ms": b"1234"}, timestamp_ms=1).due_ms == 1234
    assert _read({}, timestamp_ms=77).due_ms == 77


def test_a_hand_off_without_the_connectors_headers_is_named_by_its_own_position() -> None:
    """No readable hifi-origin, id or event time: the record's position, no id, its timestamp."""
    bare = _read({}, timestamp_ms=4242)
    assert (bare.seen, bare.origin) == (Seen(("d.retry_in", 1, 9), None, 4242, 0), "d.retry_in/1/9")
    odd = {"hifi-origin": b"nowhere", "hifi-event-time-ms": b"soon", "hifi-event-id": b""}
    assert _read(odd, timestamp_ms=4242).seen == Seen(("d.retry_in", 1, 9), None, 4242, 0)
    assert _read(odd).origin == "nowhere"  # the log line says what the header said
    found = {"hifi-origin": b"src/2/77", "hifi-event-id": b"e-1", "hifi-event-time-ms": b"1234"}
    assert _read(found).seen == Seen(("src", 2, 77), "e-1", 1234, 0)
