"""One event checked (id read or generated, time read or flagged, bad ones refused with a reason); bodies split."""

from __future__ import annotations

import gzip

import msgspec
import pytest

from config.streams import Stream, hash_token
from hifi.errors import RequestRefused
from hifi.vocabulary import Rejection
from ingest import bodies
from ingest.events import Checked, EventReader, Refused

STREAM = Stream(
    name="s",
    topic="t",
    tokens_sha256=[hash_token("tok")],
    max_body_bytes=4096,
    max_events_per_request=5,
    max_event_bytes=1024,
)


def read(raw: bytes, stream: Stream = STREAM) -> Checked | Refused:
    return EventReader(stream).read(raw)


def test_an_event_with_an_id_and_a_time_is_left_byte_for_byte() -> None:
    """The value produced is the event as it came (no re-encoding), keyed by its id."""
    raw = b'{"id": "a1",  "event_time": 1700000000000, "n": 1.50}'
    event = read(raw)
    assert isinstance(event, Checked)
    assert (event.id, event.id_generated, event.value, event.event_time_ms) == (
        "a1",
        False,
        raw,
        1_700_000_000_000,
    )
    assert event.record("t") == ("t", b"a1", raw, [])


def test_an_integer_id_and_an_rfc3339_time_are_read_as_the_connector_reads_them() -> None:
    """An integer id is its decimal string; an RFC 3339 time is epoch ms."""
    event = read(b'{"id": 42, "event_time": "2023-11-14T22:13:20Z"}')
    assert isinstance(event, Checked)
    assert (event.id, event.event_time_ms) == ("42", 1_700_000_000_000)


@pytest.mark.parametrize(
    "raw", [b'{"n": 1}', b"{}", b' { "n" : {"id": 3} } ', b'{"id": null, "n": 2}']
)
def test_a_missing_id_is_generated_and_written_into_the_event(raw: bytes) -> None:
    """An event without an id (or with null) gets one, in its id field, so everyone downstream sees it."""
    event = read(raw)
    assert isinstance(event, Checked)
    assert event.id_generated
    assert len(event.id) == 32
    written = msgspec.json.decode(event.value)
    assert written["id"] == event.id
    assert {k: v for k, v in written.items() if k != "id"} == {
        k: v for k, v in msgspec.json.decode(raw).items() if k != "id"
    }


def test_the_stream_field_names_are_used() -> None:
    """id_field and event_time_field name the fields read and written."""
    stream = STREAM.model_copy(update={"id_field": "uuid", "event_time_field": "ts"})
    event = read(b'{"id": "not-this", "ts": 1700000000000}', stream)
    assert isinstance(event, Checked)
    assert event.id_generated
    assert msgspec.json.decode(event.value)["uuid"] == event.id
    assert event.event_time_ms == 1_700_000_000_000


@pytest.mark.parametrize(
    "time", [b"", b', "event_time": "yesterday"', b', "event_time": -5', b', "event_time": true']
)
def test_a_missing_or_unreadable_time_is_flagged_arrival(time: bytes) -> None:
    """The body is left as it is; the record carries hifi-event-time: arrival."""
    raw = b'{"id": "a"' + time + b"}"
    event = read(raw)
    assert isinstance(event, Checked)
    assert event.event_time_ms is None
    assert event.value == raw
    assert event.record("t")[3] == [("hifi-event-time", b"arrival")]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"id": "a"', Rejection.NOT_JSON),
        (b"[1, 2]", Rejection.NOT_AN_OBJECT),
        (b'"text"', Rejection.NOT_AN_OBJECT),
        (b"12", Rejection.NOT_AN_OBJECT),
        (b'{"id": "a", "x": "\xff"}', Rejection.NOT_UTF8),
        (b'{"id": ""}', Rejection.INVALID_ID),
        (b'{"id": 1.5}', Rejection.INVALID_ID),
        (b'{"id": true}', Rejection.INVALID_ID),
        (b'{"id": [1]}', Rejection.INVALID_ID),
        (b'{"id": 1' + b"0" * 40 + b"}", Rejection.INVALID_ID),
        (b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}", Rejection.NOT_JSON),
        (b'{"id": "a", "event_time": 1e999}', Rejection.NOT_JSON),
    ],
)
def test_a_bad_event_is_refused_with_its_reason(raw: bytes, reason: Rejection) -> None:
    """Truncated JSON, a non-object, invalid UTF-8, an id that is no id, deep nesting: its reason."""
    event = read(raw)
    assert isinstance(event, Refused)
    assert event.reason is reason
    assert event.error
    assert "\n" not in event.error


def test_huge_numbers_elsewhere_in_an_event_pass_untouched() -> None:
    """A number beyond 64 bits outside the id and time fields is the sender's business."""
    raw = b'{"id": "a", "big": 123456789012345678901234567890, "f": 1e999}'
    event = read(raw)
    assert isinstance(event, Checked)
    assert event.value == raw


# --- bodies --------------------------------------------------------------------------------


def test_content_types_choose_the_format_and_others_are_415() -> None:
    """application/json and NDJSON types are read; anything else is 415 naming what is accepted."""
    assert bodies.body_format(b"application/json; charset=utf-8") is bodies.BodyFormat.JSON
    assert bodies.body_format(b"application/x-ndjson") is bodies.BodyFormat.NDJSON
    for bad in (None, b"text/plain", b"application/json; charset=latin-1"):
        with pytest.raises(RequestRefused) as info:
            bodies.body_format(bad)
        assert info.value.status == 415
        assert "application/json" in str(info.value)
    with pytest.raises(RequestRefused) as info:
        bodies.is_gzip(b"br")
    assert info.value.status == 415


def test_a_json_body_is_one_object_or_an_array() -> None:
    """An array's elements are the events, as their bytes; an object is one event."""
    assert bodies.split_events(b' {"a": 1} ', bodies.BodyFormat.JSON, STREAM) == [b'{"a": 1}']
    assert bodies.split_events(b'[{"a": 1}, 2 ]', bodies.BodyFormat.JSON, STREAM) == [
        b'{"a": 1}',
        b"2",
    ]
    assert bodies.split_events(b'{"a":1}\n\n{"b":2}\n', bodies.BodyFormat.NDJSON, STREAM) == [
        b'{"a":1}',
        b'{"b":2}',
    ]


@pytest.mark.parametrize(
    ("body", "kind", "status", "words"),
    [
        (b"", bodies.BodyFormat.JSON, 400, "empty"),
        (b"[]", bodies.BodyFormat.JSON, 400, "no events"),
        (b"\n \n", bodies.BodyFormat.NDJSON, 400, "no events"),
        (b'[{"a": 1}', bodies.BodyFormat.JSON, 400, "not a JSON array"),
        (b"true", bodies.BodyFormat.JSON, 400, "one JSON object or an array"),
        (b"[" * 100_000, bodies.BodyFormat.JSON, 400, "deeper"),
        (b"[" + b"{}," * 5 + b"{}]", bodies.BodyFormat.JSON, 413, "max_events_per_request=5"),
        (b'[{"a": "' + b"x" * 2000 + b'"}]', bodies.BodyFormat.JSON, 413, "max_event_bytes=1024"),
    ],
)
def test_a_body_that_is_no_events_is_refused(
    body: bytes, kind: bodies.BodyFormat, status: int, words: str
) -> None:
    """An empty, unparseable or too large body is refused as a whole, saying which limit."""
    with pytest.raises(RequestRefused) as info:
        bodies.split_events(body, kind, STREAM)
    assert info.value.status == status
    assert words in str(info.value)


def test_gunzip_stops_at_the_body_limit() -> None:
    """A zip bomb is refused once its output passes max_body_bytes; broken gzip is 400."""
    assert bodies.gunzip(gzip.compress(b"[1]") + gzip.compress(b"[2]"), STREAM) == b"[1][2]"
    bomb = gzip.compress(b"0" * 50_000_000)
    assert len(bomb) < 100_000
    with pytest.raises(RequestRefused) as info:
        bodies.gunzip(bomb, STREAM)
    assert (info.value.status, info.value.limit) == (413, "max_body_bytes")
    for broken in (b"not gzip at all", gzip.compress(b"[1, 2, 3]")[:-6]):
        with pytest.raises(RequestRefused) as info:
            bodies.gunzip(broken, STREAM)
        assert info.value.status == 400
