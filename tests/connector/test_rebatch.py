"""Re-batching by record count and body bytes, body encoding and idempotency keys."""

from __future__ import annotations

import itertools
import random
from collections import deque

import msgspec
import orjson
from aiokafka import TopicPartition

from connector.rebatch import Batch, PendingEvents, encode_body, take_batch
from hifi.envelope import Event
from tests.helpers import make_event


def _event(i: int, size: int = 10) -> Event:
    return make_event(i, topic="t", size=size)


def test_batches_are_cut_by_record_count() -> None:
    """No batch holds more than max_records events, and order is kept."""
    pending = deque(_event(i) for i in range(7))
    batches = []
    while pending:
        batches.append(take_batch(pending, max_records=3, max_bytes=1_000_000))
    assert [len(b) for b in batches] == [3, 3, 1]
    assert [b.full for b in batches] == [True, True, False]  # the last: no more events
    assert [e.id for b in batches for e in b.events] == [f"e{i}" for i in range(7)]


def test_batches_are_cut_by_body_bytes() -> None:
    """The encoded JSON array body never exceeds max_bytes, a batch is cut only where the next
    event would not fit in it, and order is kept."""
    sent = [_event(i, size=100) for i in range(10)]
    pending = deque(sent)
    limit = 400
    batches = []
    while pending:
        batch = take_batch(pending, max_records=100, max_bytes=limit)
        assert batch.full == bool(pending)  # cut by the bytes bound while events remain
        batches.append(batch)
    assert [e for batch in batches for e in batch.events] == sent
    bodies = [encode_body(batch.events, "json_array")[0] for batch in batches]
    assert all(len(body) <= limit for body in bodies)
    for body, following in zip(bodies, batches[1:], strict=False):
        # take_batch keeps one byte spare (a separator for every event): see the backlog test.
        assert len(body) + 1 + len(following.events[0].value) >= limit
    assert len(batches) < len(sent) / 2  # several events a batch, not one each


def _drain(pending: PendingEvents) -> list[Batch]:
    batches = []
    while pending:
        batches.append(pending.next_batch())
    return batches


def test_backlog_batches_are_full_by_record_count() -> None:
    """With a backlog taken in over polls of any size, every batch but the last holds exactly
    max_records events, in intake order."""
    pending = PendingEvents(max_records=7, max_bytes=1_000_000)
    sent, start = [], 0
    for poll in (3, 11, 1, 20, 15):
        sent += [_event(i) for i in range(start, start + poll)]
        pending.extend(sent[start:])
        start += poll
    assert pending.fills_a_batch()
    batches = _drain(pending)
    assert [len(batch) for batch in batches] == [7] * 7 + [1]
    assert [e for batch in batches for e in batch.events] == sent
    assert (len(pending), pending.size_bytes) == (0, 0)


def test_backlog_batches_are_full_by_body_bytes() -> None:
    """With a backlog of events of varied sizes, every batch but the last is within one event of
    max_bytes: the next event would not fit in its body."""
    rng = random.Random(5)
    sent = [_event(i, size=rng.randint(5, 400)) for i in range(300)]
    limit = 1500
    pending = PendingEvents(max_records=10_000, max_bytes=limit)
    pending.extend(sent[:120])
    pending.extend(sent[120:])
    assert pending.size_bytes == sum(len(e.value) for e in sent)
    batches = _drain(pending)
    assert [e for batch in batches for e in batch.events] == sent
    for batch, following in itertools.pairwise(batches):
        body, _ = encode_body(batch.events, "json_array")
        assert len(body) <= limit
        # One more event adds itself and a comma; take_batch keeps one byte spare (it counts a
        # separator for every event), so a body never reaches max_bytes exactly.
        assert len(body) + 1 + len(following.events[0].value) >= limit
    assert len(batches) < len(sent) / 2


def test_json_array_body_forwards_original_bytes() -> None:
    """The body is a JSON array of the original records, byte for byte."""
    events = [_event(1), _event(2)]
    body, content_type = encode_body(events, "json_array")
    assert content_type == "application/json"
    assert body == b"[" + events[0].value + b"," + events[1].value + b"]"
    assert [e["id"] for e in orjson.loads(body)] == ["e1", "e2"]


def test_ndjson_body_has_one_event_per_line() -> None:
    """NDJSON puts each event on its own line, re-encoding pretty-printed records."""
    pretty = _event(3)
    pretty.value = b'{\n  "id": "e3"\n}'
    body, content_type = encode_body([_event(1), pretty], "ndjson")
    assert content_type == "application/x-ndjson"
    lines = body.decode().splitlines()
    assert [orjson.loads(line)["id"] for line in lines] == ["e1", "e3"]


def test_idempotency_key_is_one_per_set_of_events() -> None:
    """Every attempt at the same events has the same key, even re-read elsewhere; any other set
    of events (fewer, more, other, reordered) has another key."""
    events = [_event(i) for i in range(6)]
    key = Batch(events[:3]).idempotency_key()
    assert Batch(list(events[:3])).idempotency_key() == key  # a later attempt
    back_from_retrier = [
        msgspec.structs.replace(e, tp=TopicPartition("t.retry_out", 1), offset=900 + i)
        for i, e in enumerate(events[:3])
    ]
    assert Batch(back_from_retrier).idempotency_key() == key
    others = [
        [],
        events[:1],
        events[:2],
        events[1:3],
        events[:4],
        events[3:6],
        [events[0], events[2], events[1]],
        [events[0], events[1], events[3]],
        [*events[:3], events[0]],
    ]
    keys = [Batch(other).idempotency_key() for other in others]
    assert key not in keys
    assert len(set(keys)) == len(keys)
    many = {Batch([_event(i), _event(j)]).idempotency_key() for i in range(60) for j in range(60)}
    assert len(many) == 60 * 60  # no collisions among 3,600 pairs of ids
    assert all(len(k) == 40 and int(k, 16) >= 0 for k in many)  # a hex digest, header-safe


def test_idempotency_key_depends_only_on_event_ids() -> None:
    """The same events give the same key on every attempt; other events give another key."""
    first = Batch([_event(1), _event(2)])
    again = Batch([_event(1, size=99), _event(2)])
    other = Batch([_event(2), _event(1)])
    assert first.idempotency_key() == again.idempotency_key()
    assert first.idempotency_key() != other.idempotency_key()
    left, right = Batch([_event(i) for i in range(5)]).halves()
    assert (len(left), len(right)) == (2, 3)
