"""Breaker facts (audit format 1.2): how they are encoded, read, refused, and what a 1.1 reader does."""

from __future__ import annotations

import msgspec
import pytest

from hifi import redaction
from hifi.audit import (
    BREAKER,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    HDR_FORMAT,
    AuditTrail,
    BreakerChange,
    Fact,
    FactRefused,
    Refusal,
    Slice,
    decode_fact,
    encode_fact,
)
from tests.helpers import FakeKafka

HEADERS = [(HDR_FORMAT, b"1.2")]


def _trail(replica: str | None = None) -> tuple[AuditTrail, FakeKafka]:
    writer = FakeKafka()
    trail = AuditTrail(writer, topic="audit", dest="d", node="connector@host-a:41", replica=replica)
    return trail, writer


class Fact11(msgspec.Struct, array_like=True):
    """A fact as an auditor of format 1.1 decodes one: the same fields up to
    `bisection_requests`, no `breaker`."""

    major: int
    minor: int
    fact_id: str
    dest: str
    node: str
    outcome: str
    reason: str | None
    status: int | None
    outcome_ms: int
    slices: list[Slice]
    batch: str | None = None
    bisection_requests: int = 0


async def test_a_breaker_change_round_trips_with_the_replica_and_a_masked_short_error() -> None:
    """A written breaker fact reads back as the change: route, state, since, the error masked
    and cut short, the replica (host:pid of the node without an instance id); it names no
    events."""
    redaction.register(["s3cr3t-token-value"])
    try:
        trail, writer = _trail()
        fact = trail.breaker_fact(
            route="acme",
            state="open",
            since_ms=1_000,
            last_error="HTTP 401 Bearer s3cr3t-token-value " + "x" * 300,
        )
        await trail.record_breaker(fact)
    finally:
        redaction.forget(["s3cr3t-token-value"])
    (topic, key, value, headers), *more = writer.records
    written_format = f"{FORMAT_MAJOR}.{FORMAT_MINOR}".encode()  # 1.2 and later
    assert (topic, key, headers, more) == ("audit", b"d", [(HDR_FORMAT, written_format)], [])
    read = decode_fact(value, headers)
    assert read.outcome == BREAKER
    assert read.slices == []
    assert read.events() == 0
    change = read.breaker
    assert change is not None
    assert (change.route, change.state, change.since_ms, change.replica) == (
        "acme",
        "open",
        1_000,
        "host-a:41",
    )
    assert change.last_error is not None
    assert len(change.last_error) <= 120
    assert "s3cr3t" not in change.last_error
    assert change.last_error.startswith("HTTP 401 Bearer")


def test_the_instance_id_names_the_replica() -> None:
    """With --instance-id, breaker facts name the replica by it, not by host:pid."""
    trail, _ = _trail(replica="connector-2")
    fact = trail.breaker_fact(route=None, state="closed", since_ms=5, last_error=None)
    assert fact.breaker == BreakerChange(None, "closed", 5, None, "connector-2")


@pytest.mark.parametrize(
    ("change", "slices"),
    [
        (None, []),
        (BreakerChange(None, "ajar", 1, None, "r"), []),
        (BreakerChange(None, "open", 1, None, "r"), [Slice("t", 0, [1], ["a"], [1], [1])]),
    ],
    ids=["no-change", "unknown-state", "with-events"],
)
def test_a_breaker_fact_without_a_change_in_a_known_state_or_with_events_is_refused(
    change: BreakerChange | None, slices: list[Slice]
) -> None:
    """A breaker fact must carry a change in closed/half_open/open and no events."""
    fact = Fact(FORMAT_MAJOR, 2, "f", "d", "connector@h:1", BREAKER, None, None, 1, slices)
    fact.breaker = change
    with pytest.raises(FactRefused) as refused:
        decode_fact(encode_fact(fact), HEADERS)
    assert refused.value.reason is Refusal.INCONSISTENT


def test_a_1_1_reader_takes_a_1_2_event_fact_and_refuses_a_breaker_fact_as_an_unknown_outcome() -> (
    None
):
    """An auditor of format 1.1 reads the trailing `breaker` field of 1.2 facts as absent: an
    event fact reads as before, and a breaker fact has an outcome outside its vocabulary, which
    it refuses as `unknown_outcome` (counted, one log line) rather than misreading it."""
    trail, _ = _trail()
    breaker = trail.breaker_fact(route=None, state="open", since_ms=1, last_error="HTTP 401")
    old = msgspec.msgpack.decode(encode_fact(breaker), type=Fact11)
    assert old.outcome == BREAKER
    assert old.slices == []
    assert old.outcome not in {"delivered", "handed_off", "re_offered", "dead_lettered", "filtered"}
    event_fact = Fact(FORMAT_MAJOR, 2, "g", "d", "n", "delivered", None, 200, 1, [], "b", 3)
    assert msgspec.msgpack.decode(encode_fact(event_fact), type=Fact11) == Fact11(
        FORMAT_MAJOR, 2, "g", "d", "n", "delivered", None, 200, 1, [], "b", 3
    )


def test_a_1_1_event_fact_reads_with_no_breaker() -> None:
    """A fact of format 1.1 (no `breaker` field) reads as an event fact with `breaker` None."""
    value = msgspec.msgpack.encode(
        Fact11(FORMAT_MAJOR, 1, "h", "d", "n", "delivered", None, 200, 1, [], "b", 0)
    )
    fact = decode_fact(value, [(HDR_FORMAT, b"1.1")])
    assert fact.breaker is None
    assert fact.outcome == "delivered"
