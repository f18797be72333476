"""A connector writes each change of its circuit breakers as a breaker fact on its audit trail (respx, a fake Kafka)."""

from __future__ import annotations

from pathlib import Path

import httpx
import respx
import structlog
from prometheus_client import REGISTRY

from connector.breaker import Breakers
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.rebatch import Batch
from connector.sender import HttpxSender
from hifi.audit import BREAKER, AuditTrail, Fact, decode_facts
from tests.helpers import FakeKafka, Sleeps, make_destination, make_event

URL = "https://collector.test/v1/events"
AUDIT = "audit"


def _breaker_facts(kafka: FakeKafka) -> list[Fact]:
    facts = [
        fact
        for topic, _, value, headers in kafka.records
        if topic == AUDIT
        for fact in decode_facts(value, headers)
    ]
    return [fact for fact in facts if fact.outcome == BREAKER]


@respx.mock
async def test_open_half_open_and_closed_are_each_one_fact(catalog_dir: Path) -> None:
    """Two 401 batches open the breaker (a fact naming the 401), the probe half-opens it and
    its 2xx closes it: three facts, the destination's own breaker (no route), the open and
    half-open ones since the same moment, counted in `hifi_audit_facts_total`."""
    dest = make_destination(catalog_dir, "facts401", URL, "src", breaker_failures=2)
    route = respx.post(URL).respond(401, text="token expired")
    kafka = FakeKafka()
    trail = AuditTrail(kafka, topic=AUDIT, dest=dest.name, node="connector@h:9", replica="c-0")
    client = httpx.AsyncClient()
    deliverer = Deliverer(
        HttpxSender(client, timeout_s=dest.request_timeout_s),
        dest,
        Diverter(kafka, dest, trail=trail),
        sleep=Sleeps(),
        trail=trail,
    )
    breakers = deliverer.breakers
    counted = {"dest": dest.name, "outcome": BREAKER}
    assert REGISTRY.get_sample_value("hifi_audit_facts_total", counted) == 0
    async with client:
        for n in range(2):
            await deliverer.deliver(Batch([make_event(n)]))
        route.respond(200)
        await deliverer.probe(Batch([]), breakers.destination)
    await breakers.flush()
    changes = [fact.breaker for fact in _breaker_facts(kafka)]
    assert [(c.route, c.state, c.replica) for c in changes if c] == [
        (None, "open", "c-0"),
        (None, "half_open", "c-0"),
        (None, "closed", "c-0"),
    ]
    opened, probing, closed = (c for c in changes if c)
    assert opened.last_error is not None
    assert "401" in opened.last_error
    assert opened.since_ms == probing.since_ms <= closed.since_ms
    assert closed.last_error is None
    assert REGISTRY.get_sample_value("hifi_audit_facts_total", counted) == 3


async def test_a_tenant_route_names_its_route(catalog_dir: Path) -> None:
    """A tenant route's breaker writes its route's name, so the auditor can count open routes."""
    dest = make_destination(catalog_dir, "factsroute", URL, "src", breaker_failures=1)
    kafka = FakeKafka()
    trail = AuditTrail(kafka, topic=AUDIT, dest=dest.name, node="connector@h:9")
    breakers = Breakers(dest, trail=trail)
    breakers.of("acme").failed("HTTP 403")
    await breakers.flush()
    (fact,) = _breaker_facts(kafka)
    assert fact.breaker is not None
    assert (fact.breaker.route, fact.breaker.state, fact.breaker.replica) == ("acme", "open", "h:9")


async def test_a_fact_kafka_does_not_take_is_one_log_line_not_a_crash(catalog_dir: Path) -> None:
    """A breaker fact the broker refuses is logged (`breaker_fact_failed`); the breaker moves
    on (its events' own facts are what fail a delivery)."""
    dest = make_destination(catalog_dir, "factsdown", URL, "src", breaker_failures=1)
    trail = AuditTrail(FakeKafka(fail=True), topic=AUDIT, dest=dest.name, node="connector@h:9")
    breakers = Breakers(dest, trail=trail)
    with structlog.testing.capture_logs() as logs:
        breakers.destination.failed("refused")
        await breakers.flush()
    assert not breakers.destination.closed
    assert [e["event"] for e in logs if e["event"].startswith("breaker_fact")] == [
        "breaker_fact_failed"
    ]


@respx.mock
async def test_without_an_audit_trail_no_fact_is_written(catalog_dir: Path) -> None:
    """With `[accounting] audit = false` the connector has no trail: its breaker opens and
    writes nothing to Kafka but the dead letters."""
    dest = make_destination(catalog_dir, "factsoff", URL, "src", breaker_failures=1)
    respx.post(URL).respond(401)
    kafka = FakeKafka()
    client = httpx.AsyncClient()
    deliverer = Deliverer(
        HttpxSender(client, timeout_s=dest.request_timeout_s),
        dest,
        Diverter(kafka, dest),
        sleep=Sleeps(),
    )
    async with client:
        await deliverer.deliver(Batch([make_event(1)]))
    await deliverer.breakers.flush()
    assert not deliverer.breakers.destination.closed
    assert {topic for topic, *_ in kafka.records} == {"factsoff.dlq"}
