"""Reading Kafka records as events: the connector's per-record path and the failures it sets apart."""

from __future__ import annotations

import orjson
from aiokafka import ConsumerRecord, TopicPartition

from hifi.envelope import Parsed, parse_records
from hifi.headers import append_history, failure_headers, header_map

TP = TopicPartition("src", 3)
KAFKA_TIMESTAMP_MS = 1_700_000_000_000
TAKEN_MS = 1_700_000_009_000


def _record(
    offset: int, value: bytes | None, headers: list[tuple[str, bytes]] | None = None
) -> ConsumerRecord[bytes, bytes]:
    size = len(value) if value is not None else -1
    return ConsumerRecord(
        TP.topic,
        TP.partition,
        offset,
        KAFKA_TIMESTAMP_MS,
        0,
        b"k",
        value,
        None,
        1,
        size,
        headers or (),
    )


def _parse(
    *records: ConsumerRecord[bytes, bytes], max_bytes: int = 1 << 20, retried: bool = False
) -> Parsed:
    return parse_records(
        TP,
        records,
        id_field="id",
        event_time_field="ts",
        max_bytes=max_bytes,
        taken_ms=TAKEN_MS,
        retried=retried,
    )


def test_events_keep_their_bytes_id_time_and_position() -> None:
    value = b'{"id":"a1","ts":1700000000123,"n":1}'
    parsed = _parse(_record(7, value))
    (event,) = parsed.events
    assert (event.tp, event.offset, event.value, event.id) == (TP, 7, value, "a1")
    assert event.event_time_ms == 1_700_000_000_123
    assert (event.tp, event.key) == (TopicPartition("src", 3), b"k")
    assert (event.origin, event.attempt, event.first_failure_ms, event.history) == (
        "src/3/7",
        0,
        None,
        None,
    )
    assert event.user_headers == []
    assert (parsed.malformed, parsed.missing_id, parsed.missing_time) == ([], 0, 0)
    assert (event.taken_ms, event.has_id, event.audit_id) == (TAKEN_MS, True, "a1")
    assert event.origin_parts == ("src", 3, 7)


def test_ids_and_times_in_other_forms() -> None:
    parsed = _parse(
        _record(0, b'{"id":42,"ts":"2026-11-22T10:00:00Z"}'),
        _record(1, b'{"id":"b","ts":"2026-11-22T10:00:00.5+01:00"}'),
        _record(2, b'{"id":"c","ts":1700000000000.9}'),
    )
    assert [e.id for e in parsed.events] == ["42", "b", "c"]
    assert [e.event_time_ms for e in parsed.events] == [
        1_795_341_600_000,
        1_795_338_000_500,
        1_700_000_000_000,
    ]
    assert parsed.missing_time == 0


def test_missing_or_unusable_id_and_time_fall_back_and_are_counted() -> None:
    parsed = _parse(
        _record(0, b'{"ts":5}'),
        _record(1, b'{"id":"","ts":true}'),
        _record(2, b'{"id":["x"],"ts":"yesterday"}'),
        _record(3, b'{"id":"ok","ts":-1}'),
    )
    assert [e.id for e in parsed.events] == ["src/3/0", "src/3/1", "src/3/2", "ok"]
    assert [e.event_time_ms for e in parsed.events] == [5] + [KAFKA_TIMESTAMP_MS] * 3
    assert (parsed.missing_id, parsed.missing_time) == (3, 3)
    # The audit trail names an id-less event by its origin alone, never by the fallback id.
    assert [e.audit_id for e in parsed.events] == [None, None, None, "ok"]
    assert [e.has_id for e in parsed.events] == [False, False, False, True]


def test_malformed_records_are_set_apart_with_a_reason_and_the_rest_still_parse() -> None:
    parsed = _parse(
        _record(0, b"{not json"),
        _record(1, b"[1, 2]"),
        _record(2, None),
        _record(3, b'{"id":"big","p":"' + b"x" * 200 + b'"}'),
        _record(4, b'{"id":"fine"}'),
        max_bytes=100,
    )
    assert [e.id for e in parsed.events] == ["fine"]
    found = [(record.offset, exc.reason, str(exc)) for record, exc in parsed.malformed]
    assert [(offset, reason) for offset, reason, _ in found] == [
        (0, "malformed"),
        (1, "malformed"),
        (2, "malformed"),
        (3, "too_large"),
    ]
    assert found[0][2].startswith("value is not JSON")
    assert found[1][2] == "value is JSON array, not an object"
    assert found[2][2] == "record has no value (tombstone)"
    assert found[3][2] == "record is 219 bytes, over max_batch_bytes=100"


def test_a_retried_record_carries_its_origin_attempts_and_history_from_headers() -> None:
    first = _parse(_record(9, b'{"ts":1}', headers=[("trace", b"t1")])).events[0]
    headers = [
        ("trace", b"t1"),
        *failure_headers(first, dest="d", status=503, error="down", now_ms=1000, attempt=2),
    ]
    again = _parse(_record(70, b'{"ts":1}', headers=headers), retried=True).events[0]
    assert again.origin == "src/3/9"
    assert again.id == "src/3/9"  # an id-less event keeps the same id through the retrier
    assert again.attempt == 2
    assert again.first_failure_ms == 1000
    assert orjson.loads(again.history or b"") == [
        {"at_ms": 1000, "attempt": 2, "status": 503, "error": "down"}
    ]
    assert again.user_headers == [("trace", b"t1")]
    assert header_map(headers)["hifi-origin"] == b"src/3/9"
    assert (again.origin_parts, again.audit_id, again.taken_ms) == (("src", 3, 9), None, TAKEN_MS)


def test_hifi_headers_on_a_record_not_from_the_retrier_are_not_believed() -> None:
    """A producer's forged hifi-* headers change neither the origin, nor the attempt, nor the id."""
    forged = [("hifi-origin", b"elsewhere/0/1"), ("hifi-attempt", b"99"), ("trace", b"t")]
    event = _parse(_record(5, b'{"ts":1}', headers=forged)).events[0]
    assert (event.origin, event.id, event.attempt, event.history) == ("src/3/5", "src/3/5", 0, None)
    assert event.user_headers == [("trace", b"t")]


def test_values_are_checked_whole_even_where_fields_are_not_read() -> None:
    """Bytes the destination could not parse never reach a request, wherever they are."""
    parsed = _parse(
        _record(0, b'{"id":"a","note":"caf\xc3\xa9","nested":{"x":[1,null,{"y":2.5}]}}'),
        _record(1, b'{"id":"b","note":"\xff\xfe"}'),
        _record(2, b'{"id":"c"} trailing'),
        _record(3, b'{"id":"d","n":01}'),
        _record(4, b'{"id":"e","s":"unterminated}'),
    )
    assert [e.id for e in parsed.events] == ["a"]
    reasons = {record.offset: str(exc) for record, exc in parsed.malformed}
    assert reasons[1].startswith("value is not UTF-8")
    assert all(reasons[n].startswith("value is not JSON") for n in (2, 3, 4))
    assert {exc.reason for _, exc in parsed.malformed} == {"malformed"}


def test_failure_headers_carry_the_event_id_and_time_for_the_retrier() -> None:
    """A hand-off names the event's own id (only when it has one) and its event time."""
    with_id, without_id = _parse(
        _record(1, b'{"id":"a/1","ts":1700000000123}'), _record(2, b'{"ts":1700000000456}')
    ).events
    found = header_map(
        failure_headers(with_id, dest="d", status=None, error="x", now_ms=1, attempt=1)
    )
    assert (found["hifi-event-id"], found["hifi-event-time-ms"]) == (b"a/1", b"1700000000123")
    found = header_map(
        failure_headers(without_id, dest="d", status=None, error="x", now_ms=1, attempt=1)
    )
    assert "hifi-event-id" not in found
    assert found["hifi-event-time-ms"] == b"1700000000456"


def test_a_retried_origin_is_read_in_parts_and_an_unreadable_one_falls_back() -> None:
    """`hifi-origin` splits at its last two slashes; one that is not topic/partition/offset gives
    the record's own position, and forged audit headers on a source record are not passed on."""
    cases = {
        b"a.b/0/12": ("a.b", 0, 12),
        b"x/y/4/5": ("x/y", 4, 5),
        b"src/two/5": ("src", 3, 70),
        b"/1/2": ("src", 3, 70),
        b"nonsense": ("src", 3, 70),
        b"t/1/-2": ("src", 3, 70),
    }
    for origin, parts in cases.items():
        event = _parse(_record(70, b'{"ts":1}', [("hifi-origin", origin)]), retried=True).events[0]
        assert event.origin_parts == parts, origin
    forged = [("hifi-event-id", b"forged"), ("hifi-event-time-ms", b"1"), ("trace", b"t")]
    event = _parse(_record(5, b'{"id":"real","ts":1}', headers=forged)).events[0]
    assert event.user_headers == [("trace", b"t")]
    assert event.audit_id == "real"


def test_the_history_keeps_the_last_25_failures_and_passes_earlier_ones_on_unread() -> None:
    """Each failure appends one entry, the oldest drop past 25; earlier entries pass on as they
    were written (even one orjson could not write back); a history that is not a JSON list
    starts over."""
    history = None
    for at_ms in range(30):
        history = append_history(history, {"at_ms": at_ms})
    assert [entry["at_ms"] for entry in orjson.loads(history or b"")] == list(range(5, 30))
    deep = b"[" * 300 + b"]" * 300
    assert append_history(b"[" + deep + b"]", {"at_ms": 1}) == b"[" + deep + b',{"at_ms":1}]'
    for odd in (b"nope", b'{"at_ms":0}', b"[" * 5000):
        assert append_history(odd, {"at_ms": 1}) == b'[{"at_ms":1}]'
