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
from auditor.pages import Pages
from auditor.progress import ProgressClock
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.client import AuditorTables, fetch_tables
from hifi.accounting.tables import LATE, day_availability, report_row
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
    shown = AuditorFeed._shown(found, now_ms=now_ms)
    today = shown["availability"]
    assert {k: today[k] for k in ("minutes", "up_minutes", "down_minutes")} == {
        "minutes": 5,
        "up_minutes": 4,
        "down_minutes": 1,
    }
    assert today["availability_pct"] == 80.0
    assert today["not_counted_minutes"] == 600
    assert today["pending_minutes"] == 2  # 10:05 and 10:06 (now): begun, not final
    assert today["to_come_minutes"] == 1440 - 600 - 5 - 2


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


def _row(minute_ms: int, **values: Any) -> dict[str, Any]:
    """A final minute of 100 events as the archive keeps it, up unless `values` say otherwise."""
    row = {
        "minute_ms": minute_ms,
        "entered": 100,
        "delivered": 100,
        "dead_lettered": 0,
        "dead_lettered_by_reason": {},
        "filtered": 0,
        "in_retry": 0,
        "missing": 0,
        "duplicates": 0,
        "lag_p50_ms": 100,
        "lag_p95_ms": 200,
        "lag_p99_ms": 300,
        "final": True,
        "up": True,
        "down_reason": None,
    }
    return report_row(row | values)


def test_pending_counts_only_the_minutes_begun_and_not_final() -> None:
    """At 12:34:56 with minutes final before 12:30, today's pending minutes are 12:30 to 12:34
    (5), not the 690 minutes to midnight; the 685 still to come are apart; a day that is over
    (no clock) has every minute after the horizon pending."""
    day_ms = int(DAY.timestamp() * 1000)
    now_ms = day_ms + (12 * 60 + 34) * MINUTE_MS + 56_000
    final_before_ms = day_ms + (12 * 60 + 30) * MINUTE_MS
    today = day_availability([], DAY.date(), final_before_ms=final_before_ms, now_ms=now_ms)
    assert (today["minutes"], today["pending_minutes"], today["to_come_minutes"]) == (750, 5, 685)
    assert today["up_minutes"] == 750
    exactly = day_availability(
        [], DAY.date(), final_before_ms=final_before_ms, now_ms=final_before_ms
    )
    assert exactly["pending_minutes"] == 1  # 12:30 began this millisecond
    counted = day_availability(
        [], DAY.date(), final_before_ms=final_before_ms, counted_from_ms=STARTED_MS, now_ms=now_ms
    )
    assert (counted["not_counted_minutes"], counted["minutes"]) == (600, 150)
    assert (counted["pending_minutes"], counted["to_come_minutes"]) == (5, 685)
    over = day_availability([], DAY.date(), final_before_ms=final_before_ms)
    assert (over["pending_minutes"], over["to_come_minutes"]) == (690, 0)


def test_a_minute_whose_missing_events_turned_up_reads_late_not_loss() -> None:
    """A final minute the auditor judged down for loss whose missing count went back to 0 (its
    events were delivered after it settled) reads `late`, counted down for lag, never for loss;
    one still missing events stays down for loss; the dashboard's feed says the same of the rows
    of an auditor that still answers `loss` with 0 missing."""
    late = _row(STARTED_MS, missing=0, up=False, down_reason="loss")
    lost = _row(STARTED_MS + MINUTE_MS, delivered=98, missing=2, up=False, down_reason="loss")
    slow = _row(STARTED_MS + 2 * MINUTE_MS, up=False, down_reason="lag")
    assert (late["up"], late["down_reason"]) == (False, LATE)
    assert (lost["up"], lost["down_reason"]) == (False, "loss")
    assert (slow["up"], slow["down_reason"]) == (False, "lag")
    rows = [late, lost, slow, _row(STARTED_MS + 3 * MINUTE_MS)]
    today = day_availability(rows, DAY.date(), final_before_ms=STARTED_MS + 4 * MINUTE_MS)
    assert (today["down_for_loss"], today["down_for_lag"], today["down_minutes"]) == (1, 2, 3)
    older = dict(late, down_reason="loss")  # an auditor without `verdict` in its report rows
    found = AuditorTables(
        rows=[older],
        final_before_ms=STARTED_MS + MINUTE_MS,
        counted_from_ms=STARTED_MS,
        settings={"lag_sla_s": 60},
        health=None,
    )
    shown = AuditorFeed._shown(found, now_ms=STARTED_MS + 2 * MINUTE_MS)
    assert [(r["missing"], r["up"], r["down_reason"]) for r in shown["rows"]] == [(0, False, LATE)]
    assert (shown["availability"]["down_for_loss"], shown["availability"]["down_for_lag"]) == (0, 1)
