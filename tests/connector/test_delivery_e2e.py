"""The connector against a real broker and a real HTTP destination, in this process."""

from __future__ import annotations

import asyncio
import collections
import itertools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson
from prometheus_client import REGISTRY

from connector.daemon import Connector
from devstack.destination import Delivery, Reply, TestDestination
from devstack.kafka_tools import committed_offsets, produce, produce_events, read_topic
from hifi.headers import header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from hifi.vocabulary import Outcome, Reason
from tests.helpers import events, make_destination


async def _run(connector: Connector, timeout_s: float = 60.0) -> None:
    await asyncio.wait_for(connector.run(), timeout_s)


def _metric(name: str, dest: str, **labels: str) -> float:
    """A sample of this process's registry for destination `dest` (0 when never observed)."""
    return REGISTRY.get_sample_value(name, {"dest": dest, **labels}) or 0.0


def _outcomes(dest: str) -> dict[str, float]:
    """What the connector counted: events by outcome, hand-offs, dead letters by reason, and
    the lag-out histogram's count."""
    counted: dict[str, float] = {
        outcome: _metric("hifi_connector_records_total", dest, outcome=outcome)
        for outcome in (Outcome.DELIVERED, Outcome.HANDED_OFF, Outcome.DEAD_LETTERED)
    }
    counted["handoffs"] = _metric("hifi_connector_handoffs_total", dest)
    for reason in Reason:
        counted[f"dlq:{reason}"] = _metric("hifi_connector_dead_letters_total", dest, reason=reason)
    counted["lag_out_count"] = _metric(
        "hifi_connector_lag_out_seconds_count", dest, attempt="first"
    )
    return counted


def _expected(
    *, delivered: int = 0, handed_off: int = 0, dead_letters: Mapping[str, int] | None = None
) -> dict[str, float]:
    """`_outcomes` for these events: one lag-out observation per delivered event, one hand-off
    per event handed off, and dead letters counted per reason."""
    dead_letters = dead_letters or {}
    counted: dict[str, float] = {
        Outcome.DELIVERED: delivered,
        Outcome.HANDED_OFF: handed_off,
        Outcome.DEAD_LETTERED: sum(dead_letters.values()),
        "handoffs": handed_off,
        "lag_out_count": delivered,
    }
    counted.update({f"dlq:{reason}": dead_letters.get(reason, 0) for reason in Reason})
    return counted


async def test_delivers_every_event_once_without_faults(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """With a healthy destination every produced event arrives exactly once and offsets are committed."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=3)
    sent = events(600)
    await produce_events(kafka_settings, unique, sent)
    dest = make_destination(catalog_dir, unique, destination.url, unique, max_batch_records=50)
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
    delivered = destination.delivered_ids()
    assert sorted(delivered) == sorted(e["id"] for e in sent)
    assert len(delivered) == len(set(delivered))
    assert all(len(r.events) <= 50 for r in destination.requests)
    committed = await committed_offsets(kafka_settings, dest.connector_group, unique)
    assert sum(offset or 0 for offset in committed.values()) == len(sent)
    requests = destination.requests
    assert {r.headers["content-type"] for r in requests} == {"application/json"}
    # One key per set of events: as many distinct keys as requests (no retries here), each a
    # 40-digit hex digest.
    keys = [r.headers["idempotency-key"] for r in requests]
    assert len(set(keys)) == len(keys) == len({r.ids for r in requests}) >= 600 // 50
    assert all(re.fullmatch("[0-9a-f]{40}", key) for key in keys)
    assert _outcomes(unique) == _expected(delivered=len(delivered))
    # Events were stamped when produced, seconds ago: the lag is in seconds, not ms or hours.
    mean_lag_s = _metric("hifi_connector_lag_out_seconds_sum", unique, attempt="first") / 600
    assert 0 < mean_lag_s < 60
    assert (
        _metric("hifi_connector_lag_out_seconds_bucket", unique, attempt="first", le="60.0") == 600
    )


async def test_recovers_locally_from_5xx(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A 503 then a 500 are retried locally with the request's one Idempotency-Key, other
    requests carry other keys, and nothing reaches the retrier."""
    sent = events(30)
    await produce_events(kafka_settings, unique, sent)
    destination.script(Reply(503), Reply(500))
    dest = make_destination(
        catalog_dir, unique, destination.url, unique, max_batch_records=10, max_in_flight=1
    )
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
    assert sorted(destination.delivered_ids()) == sorted(e["id"] for e in sent)
    requests = destination.requests
    assert [r.status for r in requests[:3]] == [503, 500, 200]
    assert requests[0].ids == requests[1].ids == requests[2].ids  # three attempts at one batch
    keys_of: dict[tuple[str, ...], set[str]] = {}
    for request in requests:
        keys_of.setdefault(request.ids, set()).add(request.headers["idempotency-key"])
    assert len(keys_of) >= 3  # 30 events in batches of at most 10
    assert all(len(keys) == 1 for keys in keys_of.values())  # one key for every attempt
    assert len(set.union(*keys_of.values())) == len(keys_of)  # another key for other events
    assert await read_topic(kafka_settings, dest.retry_in_topic) == []
    assert _outcomes(unique) == _expected(delivered=len(sent))


async def test_429_retry_after_is_honoured(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """After a 429 with Retry-After: 1 the next attempt comes at least one second later."""
    await produce_events(kafka_settings, unique, events(3))
    destination.script(Reply(429, retry_after="1"))
    dest = make_destination(catalog_dir, unique, destination.url, unique)
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
    first, second = destination.requests[0], destination.requests[1]
    assert first.status == 429
    assert second.status == 200
    assert second.received_ms - first.received_ms >= 1000


async def test_persistent_5xx_hands_every_event_to_the_retrier(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """When local attempts run out every event goes to NAME.retry_in with its failure headers."""
    sent = events(20)
    await produce_events(kafka_settings, unique, sent)
    destination.set_faults(1.0, [Reply(503)])
    dest = make_destination(
        catalog_dir, unique, destination.url, unique, local_retry_attempts=2, max_batch_records=7
    )
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
    assert destination.delivered_ids() == []
    handed = await read_topic(kafka_settings, dest.retry_in_topic)
    assert sorted(orjson.loads(r.value)["id"] for r in handed) == sorted(e["id"] for e in sent)
    for record in handed:
        headers = header_map(record.headers)
        assert headers["hifi-dest"] == unique.encode()
        assert headers["hifi-attempt"] == b"1"
        assert headers["hifi-status"] == b"503"
        assert b"503" in headers["hifi-error"]
        assert int(headers["hifi-first-failure-ms"]) > 0
        assert headers["hifi-origin"].startswith(f"{unique}/".encode())
    assert len(destination.requests) == 2 * 3  # three batches of at most 7, two attempts each
    committed = await committed_offsets(kafka_settings, dest.connector_group, unique)
    assert sum(offset or 0 for offset in committed.values()) == len(sent)
    assert _outcomes(unique) == _expected(handed_off=len(handed))


async def test_poison_event_alone_goes_to_the_dlq(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A 400 caused by one event in a batch dead-letters exactly that event and delivers the rest."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    sent = events(64)
    await produce_events(kafka_settings, unique, sent)
    destination.reject_ids({"e-17"})
    dest = make_destination(catalog_dir, unique, destination.url, unique, max_batch_records=64)
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
    assert sorted(destination.delivered_ids()) == sorted(e["id"] for e in sent if e["id"] != "e-17")
    dead = await read_topic(kafka_settings, dest.dlq_topic)
    assert [orjson.loads(r.value)["id"] for r in dead] == ["e-17"]
    headers = header_map(dead[0].headers)
    assert headers["hifi-reason"] == b"http_4xx"
    assert headers["hifi-status"] == b"400"
    assert dead[0].key == b"e-17"
    assert len(destination.requests) <= 1 + 2 * 6  # bisection: two requests per level
    assert _outcomes(unique) == _expected(
        delivered=len(destination.delivered_ids()), dead_letters={"http_4xx": len(dead)}
    )


async def test_malformed_and_oversize_records_do_not_block(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Records that are not JSON objects or exceed max_batch_bytes go to the DLQ; later ones arrive."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    await produce(
        kafka_settings,
        unique,
        [b"not json", b"[1, 2]", b'{"id": "big", "p": "' + b"x" * 3000 + b'"}'],
    )
    sent = events(10)
    await produce_events(kafka_settings, unique, sent)
    dest = make_destination(catalog_dir, unique, destination.url, unique, max_batch_bytes=2048)
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
    assert sorted(destination.delivered_ids()) == sorted(e["id"] for e in sent)
    dead = await read_topic(kafka_settings, dest.dlq_topic)
    reasons = sorted(header_map(r.headers)["hifi-reason"].decode() for r in dead)
    assert reasons == ["malformed", "malformed", "too_large"]
    assert sorted(r.value[:6] for r in dead) == sorted([b"not js", b"[1, 2]", b'{"id":'])
    assert _outcomes(unique) == _expected(
        delivered=len(sent), dead_letters=collections.Counter(reasons)
    )


class _Concurrency:
    """Watches a destination at each 2xx answer it sends: requests open at the destination then,
    and the connector's in-flight and paused gauges."""

    def __init__(self, dest_name: str) -> None:
        self.labels = {"dest": dest_name}
        self.destination: TestDestination | None = None
        self.answered = 0
        self.open_at_answers: list[int] = []
        self.in_flight_gauge: list[float] = []
        self.paused_gauge: list[float] = []

    def on_delivery(self, deliveries: Sequence[Delivery]) -> None:
        assert self.destination is not None
        # Every request is answered 2xx once, so the requests read minus those answered before
        # this one are the requests open at the destination just before this answer.
        self.open_at_answers.append(self.destination.request_count - self.answered)
        self.answered += 1
        self.in_flight_gauge.append(self._gauge("hifi_connector_in_flight_requests"))
        self.paused_gauge.append(self._gauge("hifi_connector_intake_paused"))

    def _gauge(self, name: str) -> float:
        value = REGISTRY.get_sample_value(name, self.labels)
        return -1.0 if value is None else value


async def test_slow_destination_pauses_intake_and_bounds_requests_in_flight(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """A slow destination pauses intake and never has more than max_in_flight requests open."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    sent = events(160)
    await produce_events(kafka_settings, unique, sent)
    watch = _Concurrency(unique)
    async with TestDestination(on_delivery=watch.on_delivery) as slow:
        watch.destination = slow
        slow.set_faults(1.0, [Reply(200, delay_s=0.2)])
        dest = make_destination(
            catalog_dir, unique, slow.url, unique, max_batch_records=10, max_in_flight=2
        )
        await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
        assert sorted(slow.delivered_ids()) == sorted(e["id"] for e in sent)
        requests = slow.requests
    assert watch.answered == len(requests) >= 16  # each request answered 2xx, once
    assert max(watch.open_at_answers) == 2  # the bound is reached, never passed
    assert 0 < max(watch.in_flight_gauge) <= 2
    # The intake limit is 2 x max_in_flight batches (40 events) and 160 wait: intake pauses.
    assert 1.0 in watch.paused_gauge
    assert REGISTRY.get_sample_value("hifi_connector_intake_paused", watch.labels) == 0.0


async def test_backlog_goes_out_in_full_batches(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """From a backlog every request but the last holds max_batch_records events or is within
    one event of max_batch_bytes."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    sent = events(80)
    for event in sent:  # 10 small ones fit in a request, only 3 or 4 large ones
        event["payload"] = "s" * 20 if event["seq"] < 40 else "L" * 250
    await produce_events(kafka_settings, unique, sent)
    size_of = {e["id"]: len(orjson.dumps(e)) for e in sent}
    position = {e["id"]: i for i, e in enumerate(sent)}
    limit = 1024
    dest = make_destination(
        catalog_dir, unique, destination.url, unique, max_batch_records=10, max_batch_bytes=limit
    )
    await _run(Connector(dest, kafka_settings, until_idle_s=1.5))
    requests = sorted(destination.requests, key=lambda r: position[r.ids[0]])
    assert [i for r in requests for i in r.ids] == [e["id"] for e in sent]  # in order, once
    cut_by_count = cut_by_bytes = 0
    for request, following in itertools.pairwise(requests):
        assert len(request.ids) <= 10
        assert len(request.body) <= limit
        if len(request.ids) == 10:
            cut_by_count += 1
        else:  # the next event (and its comma) would not have fitted
            assert len(request.body) + 1 + size_of[following.ids[0]] >= limit, request.ids
            cut_by_bytes += 1
    assert cut_by_count >= 3
    assert cut_by_bytes >= 3
