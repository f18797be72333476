"""Failure shares that mean what they say: 1 % poison events are about 1 % failed events, in
the connector's `/status`, in the auditor's health built from its facts, and on the dashboard
(not red); a rejected batch is one failed batch and its bisection requests are counted apart."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import respx

from auditor.health import Health
from connector import status_page
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.rebatch import Batch
from connector.sender import HttpxSender
from hifi.accounting.client import DestinationHealth
from hifi.audit import AuditTrail, decode_facts
from retrier.dashboard.auditor_feed import panel_health
from tests.helpers import FakeKafka, Sleeps, make_destination, make_event

URL = "https://collector.test/v1/events"
AUDIT = "audit.shares"
BATCHES, PER_BATCH = 10, 100
POISON = {f"e{batch * PER_BATCH + 37}" for batch in range(BATCHES)}  # 1 % of the events


async def _deliver_with_poison(catalog_dir: Path, name: str, kafka: FakeKafka) -> None:
    """Ten batches of 100 events, one poison event in each, refused by the destination (400)."""
    dest = make_destination(catalog_dir, name, URL, "src")

    def answer(request: httpx.Request) -> httpx.Response:
        ids = {event["id"] for event in orjson.loads(request.content)}
        return httpx.Response(400, text="bad event") if ids & POISON else httpx.Response(200)

    trail = AuditTrail(kafka, topic=AUDIT, dest=name, node="connector@test:1")
    with respx.mock:
        respx.post(URL).mock(side_effect=answer)
        async with httpx.AsyncClient() as client:
            deliverer = Deliverer(
                HttpxSender(client, timeout_s=dest.request_timeout_s),
                dest,
                Diverter(kafka, dest, trail=trail),
                sleep=Sleeps(),
                trail=trail,
            )
            for batch in range(BATCHES):
                first = batch * PER_BATCH
                await deliverer.deliver(Batch([make_event(i) for i in range(first, first + 100)]))


async def test_one_percent_poison_is_one_percent_failed_events_everywhere(
    catalog_dir: Path,
) -> None:
    """The connector's `/status` and the auditor's health both say 1 % failed events, 10
    failed batches of 10, and the same bisection requests; the dashboard does not show red."""
    kafka, name = FakeKafka(), "shares"
    await _deliver_with_poison(catalog_dir, name, kafka)
    assert sorted(kafka.ids(f"{name}.dlq")) == sorted(POISON)

    connector = status_page.health(name)
    assert connector["failed_event_share"] == 0.01
    assert connector["events"] == {"delivered": 990, "handed_off": 0, "dead_lettered": 10}
    assert connector["batches"] == {"delivered": 0, "handed_off": 0, "rejected": 10}
    assert connector["failed_batch_share"] == 1.0
    bisection = connector["bisection_requests"]
    assert bisection >= 2 * BATCHES  # each poison event is found by halving, two requests a time
    # every HTTP attempt is still counted by result: the first request of each batch, then
    # each bisection request
    assert sum(connector["requests"].values()) == BATCHES + bisection

    facts = [
        fact
        for topic, _, value, headers in kafka.records
        if topic == AUDIT
        for fact in decode_facts(value, headers)
    ]
    now_ms = max(fact.outcome_ms for fact in facts)
    health = Health()
    for fact in facts:
        health.note(fact, now_ms)
    view = health.view(now_ms)
    assert (view["events"], view["failed_events"], view["failed_event_share"]) == (1000, 10, 0.01)
    assert (view["batches"], view["failed_batches"]) == (BATCHES, BATCHES)
    assert view["bisection_requests"] == bisection

    shown = DestinationHealth.from_status(view)
    assert shown is not None
    assert panel_health(shown)["alarm"] is False


async def test_an_outage_still_shows_red(catalog_dir: Path) -> None:
    """Every batch handed off: every event failed, and the dashboard shows red."""
    kafka, name = FakeKafka(), "shares-down"
    dest = make_destination(catalog_dir, name, URL, "src", local_retry_attempts=1)
    trail = AuditTrail(kafka, topic=AUDIT, dest=name, node="connector@test:1")
    with respx.mock:
        respx.post(URL).respond(503)
        async with httpx.AsyncClient() as client:
            deliverer = Deliverer(
                HttpxSender(client, timeout_s=dest.request_timeout_s),
                dest,
                Diverter(kafka, dest, trail=trail),
                sleep=Sleeps(),
                trail=trail,
            )
            await deliverer.deliver(Batch([make_event(i) for i in range(4)]))
    assert status_page.health(name)["failed_event_share"] == 1.0
    facts = [
        fact
        for topic, _, value, headers in kafka.records
        if topic == AUDIT
        for fact in decode_facts(value, headers)
    ]
    now_ms = max(fact.outcome_ms for fact in facts)
    health = Health()
    for fact in facts:
        health.note(fact, now_ms)
    shown = DestinationHealth.from_status(health.view(now_ms))
    assert shown is not None
    assert panel_health(shown)["alarm"] is True
