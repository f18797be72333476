"""Replay records and marks as pure values: encoding, parts, versions, the last replay, the plan."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec
import orjson
import pytest

from hifi.errors import ConfigError, ReplayRecordRefused
from retrier.dlq import DeadLetter, plan_replay, select_marked
from retrier.replays import (
    MAX_RECORD_BYTES,
    ReplayFilter,
    ReplayMarks,
    Unusable,
    build_replay_records,
    checked_operator,
    decode_replay,
    encode_replay,
)

FILTER = ReplayFilter(reason="expired", since_ms=1_000)


def _kafka_record(value: bytes | None, offset: int) -> SimpleNamespace:
    return SimpleNamespace(value=value, partition=0, offset=offset)


def _letter(partition: int, offset: int) -> DeadLetter:
    return DeadLetter(
        reason="expired",
        status="503",
        error="",
        origin=f"src/0/{offset}",
        dead_ms=0,
        key=None,
        value=b"{}",
        headers=[],
        partition=partition,
        offset=offset,
    )


def test_a_replay_record_is_compact_versioned_json() -> None:
    """One record names its letters partition → offsets, with version, id, who, when and filter."""
    (record,) = build_replay_records(
        [(1, 4), (0, 13), (0, 12)], by="alice", filter=FILTER, at_ms=5, replay_id="r1"
    )
    assert orjson.loads(encode_replay(record)) == {
        "version": "1.0",
        "replay_id": "r1",
        "by": "alice",
        "at_ms": 5,
        "filter": {"reason": "expired", "since_ms": 1_000},
        "part": 1,
        "parts": 1,
        "letters": {"0": [12, 13], "1": [4]},
    }
    assert decode_replay(encode_replay(record)) == record


def test_a_large_replay_is_written_in_parts_under_the_limit() -> None:
    """300,000 letters become several records of at most MAX_RECORD_BYTES that name each once."""
    coordinates = [(p, 10**12 + o) for p in range(3) for o in range(100_000)]
    records = build_replay_records(coordinates, by="alice", filter=FILTER, at_ms=5)
    sizes = [len(encode_replay(r)) for r in records]
    assert len(records) > 1
    assert max(sizes) <= MAX_RECORD_BYTES
    assert {(r.part, r.parts) for r in records} == {
        (k, len(records)) for k in range(1, 1 + len(records))
    }
    assert len({r.replay_id for r in records}) == 1
    named = [c for r in records for c in r.coordinates()]
    assert sorted(named) == sorted(coordinates)


def test_no_letters_no_record() -> None:
    """A replay of nothing writes nothing."""
    assert build_replay_records([], by="alice", filter=FILTER, at_ms=5) == []


def test_versions_newer_minor_is_read_newer_major_refused() -> None:
    """A newer minor with keys this reader does not know is read; a newer major is refused."""
    (record,) = build_replay_records([(0, 1)], by="a", filter=FILTER, at_ms=5, replay_id="r")
    newer_minor = orjson.loads(encode_replay(record)) | {"version": "1.7", "host": "h"}
    assert decode_replay(orjson.dumps(newer_minor)).letters == {0: [1]}
    with pytest.raises(ReplayRecordRefused) as refused:
        decode_replay(orjson.dumps(newer_minor | {"version": "2.0"}))
    assert refused.value.why == Unusable.NEWER_MAJOR


@pytest.mark.parametrize(
    "value",
    [None, b"", b"not json", b"[]", b'{"version":"x"}', b'{"version":"1.0","replay_id":"r"}'],
)
def test_an_unusable_value_is_refused_as_undecodable(value: bytes | None) -> None:
    """Garbage, another shape, a bad version or missing keys: refused as undecodable."""
    with pytest.raises(ReplayRecordRefused) as refused:
        decode_replay(value)
    assert refused.value.why == Unusable.UNDECODABLE


def test_marks_keep_the_last_replay_and_skip_what_they_cannot_read() -> None:
    """Each letter carries its latest replay; bad records are counted, the others still count."""
    first = build_replay_records([(0, 1), (0, 2)], by="alice", filter=FILTER, at_ms=10)
    later = build_replay_records([(0, 2)], by="bob", filter=FILTER, at_ms=20)
    newer = msgspec.json.encode({"version": "9.0"})
    values = [encode_replay(later[0]), b"\xff", newer, encode_replay(first[0])]
    marks = ReplayMarks.from_records(_kafka_record(v, i) for i, v in enumerate(values))
    assert (marks.records, len(marks)) == (2, 2)
    assert [(s.offset, s.why) for s in marks.skipped] == [
        (1, Unusable.UNDECODABLE),
        (2, Unusable.NEWER_MAJOR),
    ]
    first_mark, second_mark = marks.mark_of((0, 1)), marks.mark_of((0, 2))
    assert first_mark is not None
    assert first_mark.by == "alice"
    assert second_mark is not None
    assert second_mark.describe() == "replayed=1970-01-01T00:00:00Z by bob"
    assert marks.mark_of((1, 1)) is None
    assert (0, 3) not in marks


def test_plan_skips_replayed_letters_unless_again() -> None:
    """A replay skips letters replayed before; with again it takes every selected letter."""
    letters = [_letter(0, 1), _letter(0, 2), _letter(1, 1)]
    marks = ReplayMarks()
    for record in build_replay_records([(0, 2)], by="a", filter=FILTER, at_ms=1):
        marks.add(record)
    plan = plan_replay(letters, marks, again=False)
    assert [d.coordinate for d in plan.letters] == [(0, 1), (1, 1)]
    assert [d.coordinate for d in plan.skipped] == [(0, 2)]
    again = plan_replay(letters, marks, again=True)
    assert (len(again.letters), again.skipped) == (3, [])
    assert select_marked(letters, marks, replayed=True) == plan.skipped


def test_who_replays_is_named() -> None:
    """An empty or overlong operator name is refused before anything is written."""
    assert checked_operator(" alice ") == "alice"
    for bad in ("", "   ", "x" * 201):
        with pytest.raises(ConfigError):
            checked_operator(bad)
