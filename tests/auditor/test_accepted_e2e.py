"""The auditor against a real broker: accepted facts counted for each destination of their topic, loss from them."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import structlog
from prometheus_client import REGISTRY

from auditor.archive.read import read_minutes
from auditor.daemon import Auditor
from devstack.kafka_tools import produce
from hifi.audit import HDR_FORMAT, AuditTrail, Fact, Seen, encode_fact
from hifi.audit.accepted import AcceptedTrail, accepted_event
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings
from hifi.vocabulary import Outcome
from tests.auditor.support import (
    audited_destination,
    last_minute_final_in,
    rows_of,
    running,
    settled,
)
from tests.helpers import until

LOST_OFFSET = 99  # acknowledged to a sender, never seen in the topic: Kafka lost it
# The events are of the last minute, final this long after the test starts: time for the
# auditor to join its group and read them, and no wait for this minute's end.
FINAL_IN_S = 15.0


async def test_accepted_events_are_counted_per_destination_and_loss_from_them(
    kafka_settings: KafkaSettings, catalog_dir: Path, tmp_path: Path, unique: str
) -> None:
    """Five events of a stream's topic accepted (and a sixth acknowledged, then lost): the
    destination that delivered three has two waiting (still in the topic, no connector group
    past them) and misses the lost one, as does the one that delivered all five, named by its
    origin (an event never seen entering is held nowhere); a destination of another topic has no accepted events
    and counts as before; a fact of an unknown outcome is refused with its reason."""
    stream, other, audit_topic = unique, f"{unique}.other", f"{unique}.audit"
    minute_ms, settle_s = last_minute_final_in(FINAL_IN_S)
    await kafka_admin.ensure_topics(kafka_settings, [stream, other, audit_topic], partitions=1)
    url, keys = "http://127.0.0.1:9", {"settle_s": settle_s}
    some = audited_destination(catalog_dir, f"{unique}-some", url, stream, **keys)
    every = audited_destination(catalog_dir, f"{unique}-every", url, stream, **keys)
    plain = audited_destination(catalog_dir, f"{unique}-plain", url, other, **keys)
    at_ms = minute_ms + 30_000
    values = [orjson.dumps({"id": f"a-{i}", "event_time": at_ms}) for i in range(5)]
    async with open_producer(kafka_settings) as producer:
        written = await producer.send_all([(stream, None, v, []) for v in values])
        offsets = [m.offset for m in written]
        await produce(kafka_settings, other, [orjson.dumps({"id": "p-0", "event_time": at_ms})])
        accepted = [
            accepted_event(stream, 0, o, f"a-{i}", at_ms, at_ms) for i, o in enumerate(offsets)
        ]
        accepted.append(accepted_event(stream, 0, LOST_OFFSET, "lost", at_ms, at_ms))
        await (await AcceptedTrail(producer, topic=audit_topic).write(accepted))
        for dest, delivered in ((some, offsets[:3]), (every, offsets), (plain, [0])):
            topic = other if dest is plain else stream
            trail = AuditTrail(producer, topic=audit_topic, dest=dest.name, node="connector@t:1")
            seen = [Seen((topic, 0, o), None, at_ms, at_ms) for o in delivered]
            await trail.record(Outcome.DELIVERED, seen, status=200)
        vanished = Fact(
            1, 3, uuid.uuid4().hex, some.name, "x@t:1", "vanished", None, None, at_ms, []
        )
        await producer.send_all(
            [(audit_topic, None, encode_fact(vanished), [(HDR_FORMAT, b"1.3")])]
        )

    auditor = Auditor(
        [some, every, plain],
        kafka_settings,
        archive_dir=tmp_path / "archive",
        roll_s=0.5,
        topic=audit_topic,
        group_id=f"{unique}.auditor",
    )
    with structlog.testing.capture_logs() as logs:
        async with running(auditor):
            await settled(auditor, some.name, 5)
            await settled(auditor, every.name, 5)
            await settled(auditor, plain.name, 1)
            assert await until(
                lambda: any(r["missing_ids"] for r in rows_of(auditor, every.name)), timeout_s=60
            ), "the auditor never named the lost event"
            rows = {d.name: rows_of(auditor, d.name) for d in (some, every, plain)}
            assert auditor.accounts is not None
            refused = dict(auditor.accounts.refused)

    def totals(name: str) -> tuple[int, ...]:
        figures = ("entered", "accepted", "delivered", "waiting", "missing")
        return tuple(sum(r[k] for r in rows[name] if r["final"]) for k in figures)

    assert totals(some.name) == (5, 6, 3, 2, 1)
    assert totals(every.name) == (5, 6, 5, 0, 1)
    assert totals(plain.name) == (1, 0, 1, 0, 0)
    named = [i for r in rows[every.name] for i in r["missing_ids"]]
    assert named == [f"{stream}/0/{LOST_OFFSET}"]
    assert all(r["down_reason"] == "loss" for r in rows[every.name] if r["missing"])
    assert refused.get("unknown_outcome") == 1
    (line,) = [e for e in logs if e["event"] == "audit_record_refused"]
    assert line["reason"] == "unknown_outcome"
    assert "'vanished'" in line["error"]
    kind = {"dest": every.name, "kind": "accepted"}
    assert REGISTRY.get_sample_value("hifi_auditor_events_total", kind) == 6
    assert (
        REGISTRY.get_sample_value("hifi_auditor_events_total", {**kind, "dest": plain.name}) is None
    )
    archived = read_minutes(tmp_path / "archive", every.name, from_ms=None, to_ms=None)
    assert sum(r["accepted"] for r in archived) == 6
