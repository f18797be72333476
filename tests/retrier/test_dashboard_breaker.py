"""The dashboard's destination panel shows the circuit breaker the auditor learned from breaker facts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import httpx
from aiokafka import TopicPartition
from starlette.applications import Starlette
from starlette.routing import Route

from auditor.accounts import Accounts
from auditor.archive import Archive
from auditor.pages import Pages
from auditor.progress import ProgressClock
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.client import BreakerView, fetch_tables
from hifi.audit import AuditTrail, Fact, encode_fact
from retrier.dashboard.auditor_feed import AuditorFeed, panel_breaker
from tests.auditor.support import audited_destination
from tests.helpers import FakeKafka
from tests.retrier.test_dashboard_availability import BASE, _json

OPENED = datetime(2026, 11, 26, 4, 12, tzinfo=UTC)
OPENED_MS = int(OPENED.timestamp() * 1000)
NOW_MS = OPENED_MS + 3 * MINUTE_MS + 20_000


def _fact(replica: str, state: str, *, error: str | None = None, route: str | None = None) -> Fact:
    trail = AuditTrail(
        FakeKafka(), topic="audit", dest="shop", node="connector@h:1", replica=replica
    )
    fact = trail.breaker_fact(route=route, state=state, since_ms=OPENED_MS, last_error=error)
    fact.outcome_ms = OPENED_MS
    return fact


def _record(fact: Fact, offset: int) -> SimpleNamespace:
    return SimpleNamespace(
        topic="audit",
        partition=0,
        offset=offset,
        key=fact.dest.encode(),  # a breaker fact names no events: keyed by its destination
        value=encode_fact(fact),
        headers=[("hifi-audit-format", b"1.2")],
    )


async def test_an_open_breaker_reaches_the_panel_through_the_auditor(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """Two replicas' breaker facts (one open on a 401, one closed; a tenant route open; one
    fact read twice) go through the auditor's accounts, its /status, `fetch_tables` and the
    dashboard feed: the panel says "open since 04:12 UTC (3 min) on 1 of 2 replicas: HTTP 401
    ..." in red, with one tenant route not closed."""
    dest = audited_destination(catalog_dir, "shop", "http://shop.test/in", "shop.src")
    accounts = Accounts(
        {dest.name: dest},
        Archive(tmp_path / "archive"),
        audit_topic="audit",
        clock=ProgressClock(lambda tp: None, lambda: NOW_MS),
        roll_s=60.0,
        group_id="test",
        partitions={"shop.src": [0]},
        now_ms=lambda: NOW_MS,
    )
    opened = _fact("c-1", "open", error="HTTP 401 Unauthorized")
    facts = [opened, opened, _fact("c-2", "closed"), _fact("c-2", "open", route="acme")]
    records = [_record(fact, n) for n, fact in enumerate(facts)]
    accounts.intake.facts(TopicPartition("audit", 0), records)
    assert accounts.refused == {}
    pages = Pages(accounts, lambda: NOW_MS)
    app = Starlette(
        routes=[Route("/tables", _json(pages.tables)), Route("/status", _json(pages.status))]
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        found = await fetch_tables(client, BASE, dest.name)
    assert found.health is not None
    assert found.health.breaker == BreakerView("open", OPENED_MS, "HTTP 401 Unauthorized", 2, 1, 1)
    shown = AuditorFeed._shown(found, now_ms=NOW_MS)
    assert shown["health"]["breaker"]["state"] == "open"  # the /api/ field the page reads
    line = panel_breaker(found.health.breaker, NOW_MS)
    assert line is not None
    assert line["alarm"] is True
    assert line["text"] == (
        "open since 04:12 UTC (3 min) on 1 of 2 replicas: HTTP 401 Unauthorized;"
        " 1 tenant route not closed"
    )


def test_half_open_is_not_red_and_closed_shows_nothing() -> None:
    """A half-open breaker shows without red; a closed one with no open route shows nothing."""
    half = panel_breaker(BreakerView("half_open", OPENED_MS, "timeout", 1, 1, 0), NOW_MS)
    assert half is not None
    assert (half["text"], half["alarm"]) == ("half-open since 04:12 UTC (3 min): timeout", False)
    assert panel_breaker(BreakerView("closed", None, None, 3, 0, 0), NOW_MS) is None
