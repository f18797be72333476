"""The dead-letter index: filters, paging newest first, find, masking, replay marks; `indexing()` on a broker."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator, MutableMapping
from dataclasses import astuple
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.structs import ConsumerRecord
from structlog.testing import capture_logs

from config.catalog import Catalog
from hifi import redaction
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings
from retrier.dlq import indexing as dlq_indexing
from retrier.dlq.index import REASONS, UNKNOWN, Cursor, DeadLetterIndex, LetterFilter, LetterRow
from retrier.dlq.indexing import indexing
from retrier.dlq.letter import EXCERPT_CHARS
from tests.helpers import make_destination, until, write_destination
from tests.retrier.support import create_topics

TOPIC = "shop.dlq"
T0 = 1_700_000_000_000
PIECE = 8  # masking leaves no run of this many characters of a secret


def letter(
    partition: int,
    offset: int,
    *,
    dead_ms: int,
    reason: str = "http_4xx",
    event_id: str | None = None,
    body: bytes | None = None,
    error: str = "HTTP 400 Bad Request: rejected",
    status: str | None = "400",
    extra: list[tuple[str, bytes]] | None = None,
) -> ConsumerRecord[bytes, bytes]:
    """A record of NAME.dlq as the connector writes it."""
    event_id = f"e-{partition}-{offset}" if event_id is None else event_id
    headers = [
        *(extra or []),
        ("hifi-reason", reason.encode()),
        ("hifi-dest", b"shop"),
        ("hifi-error", error.encode()),
        ("hifi-origin", f"shop.src/{partition}/{offset + 1000}".encode()),
        ("hifi-history", orjson.dumps([{"at_ms": dead_ms, "attempt": 1, "error": error}])),
        ("hifi-event-id", event_id.encode()),
    ]
    if status is not None:
        headers.append(("hifi-status", status.encode()))
    value = orjson.dumps({"id": event_id, "n": offset}) if body is None else body
    return ConsumerRecord(
        TOPIC, partition, offset, dead_ms, 0, None, value, None, 0, len(value), headers
    )


@pytest.fixture
def index(tmp_path: Path) -> Iterator[DeadLetterIndex]:
    with DeadLetterIndex(TOPIC, spill_dir=tmp_path / "spill") as opened:
        yield opened


def keys(rows: list[LetterRow]) -> list[tuple[int, int]]:
    return [(row.partition, row.offset) for row in rows]


def test_filters_by_reason_and_time(index: DeadLetterIndex) -> None:
    """Reason and time range select exactly their letters (from inclusive, to exclusive)."""
    reasons = ["http_4xx", "expired", "expired", "malformed", "http_4xx", "expired"]
    index.add(letter(0, i, dead_ms=T0 + i * 1000, reason=r) for i, r in enumerate(reasons))
    assert index.count(LetterFilter()) == len(index) == 6
    assert index.count(LetterFilter(reason="expired")) == 3
    assert keys(index.page(LetterFilter(reason="expired")).rows) == [(0, 5), (0, 2), (0, 1)]
    window = LetterFilter(from_ms=T0 + 1000, to_ms=T0 + 4000)
    assert keys(index.page(window).rows) == [(0, 3), (0, 2), (0, 1)]
    assert index.count(LetterFilter(reason="http_4xx", from_ms=T0 + 1)) == 1
    assert index.counts_by_reason() == {
        **dict.fromkeys(REASONS, 0),
        "http_4xx": 2,
        "expired": 3,
        "malformed": 1,
    }
    assert index.counts_by_reason(window)["expired"] == 2
    with pytest.raises(ValueError, match="http_4xx"):
        index.count(LetterFilter(reason="gone"))


def test_text_is_searched_in_the_first_kilobyte_of_the_body_only(index: DeadLetterIndex) -> None:
    """A text past the excerpt but within the first 1024 characters of the body is found; one
    beyond them is not; the excerpt shows only the start of the body."""
    filler = b"a" * 500
    near = b'{"p":"' + filler + b"NEEDLEnear" + filler + b"a" * 20 + b'NEEDLEfar"}'
    assert near.index(b"NEEDLEnear") + 10 <= 1024 < near.index(b"NEEDLEfar")
    index.add([letter(0, 0, dead_ms=T0, body=near), letter(0, 1, dead_ms=T0)])
    assert index.count(LetterFilter(text="needlenear")) == 1
    assert index.count(LetterFilter(text="NEEDLEfar")) == 0
    [row] = index.page(LetterFilter(text="NeedleNear")).rows
    assert len(row.excerpt) <= EXCERPT_CHARS
    assert row.excerpt.startswith('{"p":"aaa')
    assert "NEEDLE" not in row.excerpt


def test_text_is_case_insensitive_over_the_id_the_error_and_other_headers(
    index: DeadLetterIndex,
) -> None:
    """The text filter finds, whatever the case, an event id, an error and a header's value."""
    index.add(
        [
            letter(0, 0, dead_ms=T0, event_id="Order-77"),
            letter(0, 1, dead_ms=T0, error="HTTP 422 Unprocessable: Quota Exceeded"),
            letter(0, 2, dead_ms=T0, extra=[("x-tenant", b"ACME-Europe")]),
            letter(0, 3, dead_ms=T0),
        ]
    )
    assert keys(index.page(LetterFilter(text="order-77")).rows) == [(0, 0)]
    assert keys(index.page(LetterFilter(text="QUOTA exceeded")).rows) == [(0, 1)]
    assert keys(index.page(LetterFilter(text="x-tenant=acme-eu")).rows) == [(0, 2)]
    assert index.count(LetterFilter(text="  order-77 ")) == 1  # the ends of a query do not count
    assert index.count(LetterFilter(text="order-77quota")) == 0  # never across two fields


def test_a_text_filter_counts_letters_added_after_it_was_first_asked(
    index: DeadLetterIndex,
) -> None:
    """A text filter's result is kept, and extended to the letters indexed since."""
    index.add(letter(0, i, dead_ms=T0 + i, error="HTTP 409 duplicate") for i in range(3))
    assert index.count(LetterFilter(text="duplicate")) == 3
    index.add([letter(0, 3, dead_ms=T0 + 3, error="HTTP 409 duplicate"), letter(0, 4, dead_ms=T0)])
    assert index.count(LetterFilter(text="duplicate")) == 4
    assert index.count(LetterFilter(text="duplicate", reason="expired")) == 0


def test_pages_run_newest_first_and_a_cursor_holds_while_letters_arrive(
    index: DeadLetterIndex,
) -> None:
    """Newest first by (dead time, partition, offset); the letters appended between two pages
    (newer ones, and older ones from a lagging partition) neither repeat nor hide a letter."""
    index.add(letter(0, i, dead_ms=T0 + 10 * i) for i in range(6))
    index.add(letter(1, i, dead_ms=T0 + 10 * i + (5 if i % 2 else 0)) for i in range(6))
    first = index.page(LetterFilter(), limit=4)
    assert [(r.dead_ms - T0, r.partition) for r in first.rows] == [
        (55, 1),
        (50, 0),
        (40, 1),
        (40, 0),
    ]
    assert first.total == 12
    assert first.next is not None
    assert Cursor.from_token(first.next.token()) == first.next
    index.add(letter(0, i, dead_ms=T0 + 100 + i) for i in range(6, 9))  # newer: not on later pages
    index.add([letter(2, 0, dead_ms=T0 + 35), letter(2, 1, dead_ms=T0 + 38)])  # older than cursor
    seen = list(first.rows)
    cursor: Cursor | None = first.next
    for _ in range(5):  # 10 letters left: 3 pages
        if cursor is None:
            break
        page = index.page(LetterFilter(), before=cursor, limit=4)
        assert page.total == 17
        seen.extend(page.rows)
        cursor = page.next
    assert cursor is None
    order = [(r.dead_ms, r.partition, r.offset) for r in seen]
    assert order == sorted(order, reverse=True)
    assert len(set(order)) == len(order) == 12 + 2  # the first 12 and the 2 older ones, once each
    assert {(2, 0), (2, 1)} <= set(keys(seen))
    assert (0, 6) not in keys(seen)


def test_find_by_event_id_by_origin_and_by_position_in_the_dlq(index: DeadLetterIndex) -> None:
    """`find` takes an event id, an origin topic/partition/offset, or a letter's own position."""
    index.add(letter(0, i, dead_ms=T0 + i) for i in range(50))
    index.add([letter(1, 0, dead_ms=T0 + 99, event_id="e-0-7")])  # the same event dead again
    assert keys(index.find("e-0-7")) == [(1, 0), (0, 7)]
    assert keys(index.find("shop.src/0/1012")) == [(0, 12)]
    assert keys(index.find(f"{TOPIC}/0/33")) == [(0, 33)]
    assert [index.find(key) for key in ("e-0-", "", "other.dlq/0/3")] == [[], [], []]
    [row] = index.find(" e-0-20 ")
    assert (row.event_id, row.origin, row.reason, row.status) == (
        "e-0-20",
        "shop.src/0/1020",
        "http_4xx",
        "400",
    )


def test_a_secret_from_the_environment_is_never_shown_nor_searchable(
    index: DeadLetterIndex, catalog_dir: Path, tmp_path: Path
) -> None:
    """A destination token (registered by the catalog from $TOKEN) echoed in a header, the error
    and the body appears in no row, no excerpt and no spill file, and a search for it finds
    nothing: counts cannot be used to guess it."""
    token = secrets.token_urlsafe(30)
    write_destination(
        catalog_dir,
        "shop",
        url="https://example.invalid",
        source_topics=["shop.src"],
        headers={"Authorization": "Bearer ${TOKEN}"},
    )
    Catalog(catalog_dir, environ={"TOKEN": token}).load("shop")
    body = orjson.dumps({"echo": f"Bearer {token}", "id": "e-1"})
    index.add(
        [
            letter(
                0,
                0,
                dead_ms=T0,
                body=body,
                error=f"HTTP 401: bad token {token}",
                extra=[("authorization", f"Bearer {token}".encode())],
            )
        ]
    )
    rows = [*index.page(LetterFilter()).rows, *index.find("e-0-0")]
    assert len(rows) == 2
    shown = " ".join(str(value) for row in rows for value in astuple(row))
    spilled = b"".join(path.read_bytes() for path in (tmp_path / "spill").iterdir())
    for start in range(len(token) - PIECE + 1):
        piece = token[start : start + PIECE]
        assert piece not in shown
        assert piece.encode() not in spilled
        assert piece.lower().encode() not in spilled
        assert index.count(LetterFilter(text=piece)) == 0
    assert index.count(LetterFilter(text="bad token ***")) == 1  # the masked form is kept


@pytest.fixture(autouse=True)
def no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test registers its own secrets and leaves the process's registry as it was."""
    monkeypatch.setattr(redaction, "_secrets", set())
    monkeypatch.setattr(redaction, "_registry", None)


class _Odd:
    """A record whose headers cannot be read."""

    topic, partition, offset, timestamp, key, value = TOPIC, 0, 1, T0, None, b"{}"
    headers = 42


def test_a_record_that_cannot_be_read_is_indexed_as_unknown(index: DeadLetterIndex) -> None:
    """Odd records are listed with reason "unknown" at their position, none dropped."""
    no_reason = letter(0, 0, dead_ms=T0)
    no_reason.headers = [(n, v) for n, v in no_reason.headers if n != "hifi-reason"]
    odd_reason = letter(0, 2, dead_ms=T0 + 2, reason="lost-in-space")
    not_utf8 = letter(0, 3, dead_ms=T0 + 3, body=b"\xff\xfe{", extra=[("x", b"\xc3")])
    added = index.add([no_reason, _Odd(), odd_reason, not_utf8, object()])
    assert added == len(index) == 5
    assert index.counts_by_reason()[UNKNOWN] == 4
    rows = {(row.partition, row.offset): row for row in index.page(LetterFilter(), limit=10).rows}
    assert rows[(0, 1)].reason == UNKNOWN
    assert "cannot be read" in rows[(0, 1)].error
    assert rows[(0, 3)].reason == "http_4xx"
    assert "\ufffd" in rows[(0, 3)].excerpt
    assert rows[(-1, -1)].reason == UNKNOWN
    assert index.add([letter(0, 3, dead_ms=T0 + 3)]) == 0  # indexed already: not twice


def test_marked_letters_show_their_replay_and_filter_by_it(index: DeadLetterIndex) -> None:
    """Replay marks appear on rows, select with `replayed`, and wait for letters not yet in."""
    index.add(letter(p, i, dead_ms=T0 + i) for p in (0, 1) for i in range(5))
    assert index.mark_replayed([(0, 1), (1, 3), (1, 9)], at_ms=T0 + 500, by="ops@example") == 2
    assert index.count(LetterFilter(replayed=True)) == 2
    assert index.coordinates(LetterFilter(replayed=False)) == {0: [0, 2, 3, 4], 1: [0, 1, 2, 4]}
    [row] = index.find("e-1-3")
    assert (row.replayed_ms, row.replayed_by) == (T0 + 500, "ops@example")
    assert index.find("e-0-0")[0].replayed_ms is None
    index.add(letter(1, i, dead_ms=T0 + i) for i in range(5, 10))
    assert keys(index.page(LetterFilter(replayed=True)).rows) == [(1, 9), (1, 3), (0, 1)]


def test_growth_and_failure_groups(index: DeadLetterIndex) -> None:
    """Letters per minute, oldest first; failures that differ only in ids are one group."""
    index.add(
        letter(0, i, dead_ms=T0 + i * 20_000, error=f"HTTP 400: order {9000 + i}") for i in range(9)
    )
    index.add([letter(1, 0, dead_ms=T0, error="HTTP 503 busy", status="503")])
    assert index.growth(T0 + 180_000, bucket_s=60, buckets=4) == [0, 4, 3, 3]
    assert index.failure_groups(T0) == [
        ("400", "HTTP 400: order #", 9),
        ("503", "HTTP 503 busy", 1),
    ]
    assert index.failure_groups(T0 + 100_000) == [("400", "HTTP 400: order #", 4)]


def test_coordinates_of_a_filter(index: DeadLetterIndex) -> None:
    """What a replay of a filter reads: per partition, the offsets in order."""
    index.add(
        letter(p, i, dead_ms=T0 + i, reason="expired" if i % 2 else "http_4xx")
        for p in (0, 1)
        for i in range(6)
    )
    assert index.coordinates(LetterFilter(reason="expired")) == {0: [1, 3, 5], 1: [1, 3, 5]}
    assert index.coordinates(LetterFilter(text="nothing like this")) == {}


@pytest.mark.integration
async def test_indexing_survives_an_unreachable_broker(tmp_path: Path, catalog_dir: Path) -> None:
    """With no broker the indexing task warns and keeps trying; the block runs and ends cleanly."""
    dest = make_destination(catalog_dir, "shop", "https://example.invalid", "shop.src")
    with capture_logs() as logs:
        async with indexing(
            KafkaSettings(bootstrap="127.0.0.1:1"), [dest], spill_dir=tmp_path
        ) as found:
            assert await until(lambda: _warnings(logs) >= 2, 30)  # failed, waited, tried again
            assert not found["shop"].ready.is_set()


def _warnings(logs: list[MutableMapping[str, Any]]) -> int:
    return sum(entry["event"] == "dlq_index_read_failed" for entry in logs)


@pytest.mark.integration
async def test_indexing_reaches_ready_and_follows_new_letters(
    kafka_settings: KafkaSettings, catalog_dir: Path, tmp_path: Path, unique: str
) -> None:
    """`indexing()` reads every letter NAME.dlq holds, says ready, then indexes new ones."""
    dest = make_destination(catalog_dir, unique, "https://example.invalid", f"{unique}.src")
    await create_topics(kafka_settings, dest)

    async def dead_letters(start: int, count: int) -> None:
        records = [
            letter(i % 2, i, dead_ms=T0 + i, event_id=f"id-{i}")
            for i in range(start, start + count)
        ]
        async with open_producer(kafka_settings) as producer:
            await producer.send_all(
                [(dest.dlq_topic, r.key, r.value, list(r.headers)) for r in records]
            )

    await dead_letters(0, 30)
    async with indexing(kafka_settings, [dest], spill_dir=tmp_path) as found:
        index = found[unique]
        await asyncio.wait_for(index.ready.wait(), 60)
        assert len(index) == index.expected == 30
        assert index.count(LetterFilter(reason="http_4xx")) == 30
        await dead_letters(30, 5)
        assert await until(lambda: len(index) == 35, 30)
        [row] = index.find("id-33")
        assert row.origin == "shop.src/1/1033"
        assert (tmp_path / unique / "text.bin").stat().st_size > 0  # spilled where it was told


@pytest.mark.integration
async def test_a_dlq_created_later_is_ready_at_once_and_indexed_once_found(
    kafka_settings: KafkaSettings,
    catalog_dir: Path,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A DLQ that does not exist yet has nothing to catch up with; its letters are indexed once
    the task finds the topic."""
    monkeypatch.setattr(dlq_indexing, "DISCOVER_EVERY_S", 0.2)
    dest = make_destination(catalog_dir, unique, "https://example.invalid", f"{unique}.src")
    async with indexing(kafka_settings, [dest]) as found:
        index = found[unique]
        await asyncio.wait_for(index.ready.wait(), 30)
        assert (len(index), index.expected) == (0, 0)
        await create_topics(kafka_settings, dest)
        async with open_producer(kafka_settings) as producer:
            record = letter(0, 0, dead_ms=T0, event_id="late-1")
            await producer.send_all([(dest.dlq_topic, None, record.value, list(record.headers))])
        assert await until(lambda: len(index) == 1, 30)
        assert index.find("late-1")[0].reason == "http_4xx"
