"""The dashboard's "today" availability counts only the minutes since the auditor counts: the
minutes of the day before its first minute have no data at all and are not counted as up."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from aiokafka import TopicPartition
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from auditor.accounts import Accounts
from auditor.archive import Archive
from auditor.buckets import MINUTE_MS
from auditor.client import fetch_tables
from auditor.pages import Pages
from auditor.progress import ProgressClock
from retrier.dashboard.auditor_feed import AuditorFeed
from tests.auditor.support import audited_destination

DAY = datetime(2026, 11, 26, tzinfo=UTC)
STARTED_MS = int(DAY.timestamp() * 1000) + 10 * 60 * MINUTE_MS  # 10:00, the auditor's first minute
BASE = "http://auditor.test"
SOURCE = TopicPartition("shop.src", 0)


def _json(
    provider: Callable[[Request], Awaitable[Any]],
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return JSONResponse(await provider(request))

    return endpoint


async def test_today_counts_only_the_minutes_since_the_auditor_counts(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """An auditor counting since 10:00 with 5 final minutes, one of them down: the dashboard's
    "today" is 80 % over 5 final minutes, the 600 minutes before 10:00 not counted (they were
    counted as up before: 99.83 % over 605)."""
    dest = audited_destination(catalog_dir, "shop", "http://shop.test/in", "shop.src", settle_s=1)
    now_ms = STARTED_MS + 6 * MINUTE_MS
    accounts = Accounts(
        {dest.name: dest},
        Archive(tmp_path / "archive"),
        audit_topic="audit",
        clock=ProgressClock(lambda tp: None, lambda: now_ms),
        roll_s=60.0,
        group_id="test",
        partitions={"shop.src": [0]},
        now_ms=lambda: now_ms,
    )
    accounts.assigned({SOURCE, TopicPartition("audit", 0)})
    ledger = accounts.shares[SOURCE].ledgers[dest.name]
    ledger.enter(STARTED_MS, ("shop.src", 0), [0])  # entered, never delivered: a down minute
    ledger.enter(STARTED_MS + 2 * MINUTE_MS, ("shop.src", 0), [])  # an empty minute: up
    accounts.settling.cycle({SOURCE: STARTED_MS + 5 * MINUTE_MS + 1000}, now_ms)  # 10:00-10:04
    pages = Pages(accounts, lambda: now_ms)
    app = Starlette(
        routes=[Route("/tables", _json(pages.tables)), Route("/status", _json(pages.status))]
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        found = await fetch_tables(client, BASE, dest.name, from_ms=int(DAY.timestamp() * 1000))
    assert found.counted_from_ms == STARTED_MS
    shown = AuditorFeed._shown(found, STARTED_MS - 3 * 60 * MINUTE_MS, DAY.date())
    today = shown["availability"]
    assert {k: today[k] for k in ("minutes", "up_minutes", "down_minutes")} == {
        "minutes": 5,
        "up_minutes": 4,
        "down_minutes": 1,
    }
    assert today["availability_pct"] == 80.0
    assert today["not_counted_minutes"] == 600
    assert today["pending_minutes"] == 1440 - 600 - 5


async def test_an_auditor_without_a_minute_counts_from_now(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """An auditor that never held a minute says it counts from the current minute, so the
    dashboard counts no minute of the day as up."""
    dest = audited_destination(catalog_dir, "shop", "http://shop.test/in", "shop.src")
    now_ms = STARTED_MS + 30_000
    accounts = Accounts(
        {dest.name: dest},
        Archive(tmp_path / "archive"),
        audit_topic="audit",
        clock=ProgressClock(lambda tp: None, lambda: now_ms),
        roll_s=60.0,
        group_id="test",
        partitions={"shop.src": [0]},
        now_ms=lambda: now_ms,
    )
    status = await Pages(accounts, lambda: now_ms).status(None)  # type: ignore[arg-type]
    assert status["dests"]["shop"]["counted_from_ms"] == STARTED_MS
