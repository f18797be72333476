"""The health panel on the dashboard's page in a real browser during an outage: the breaker's
line red while open and gone once closed, inside its panel however long the error; the
hand-off errors whole at 1280 and 1920 px; a minute whose missing events turned up says
`late`; the panels' runbook links while a base is set, none without."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from playwright.async_api import expect

from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.client import BreakerView, DestinationHealth
from hifi.accounting.tables import report_row
from retrier.dashboard.api import STATIC_DIR
from retrier.dashboard.auditor_feed import panel_health
from retrier.dashboard.runbook import runbook_links
from tests.retrier.support import chromium

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ORIGIN = "http://dashboard.test"
NOW_MS = 1_790_000_200_000
DEST = "tvinsight-eu-west-1-production-events-primary-replica-of-the-long-named-tenant"
LONG_ERROR = (
    "HTTP 401 Unauthorized: https://ingest.eu-west-1.tvinsight.example.com/api/v3/events/"
    f"{DEST}/batches?token_hint=expired_or_revoked_credential_for_this_destination_please_rotate"
)
OPEN = BreakerView("open", 1_790_000_000_000, LONG_ERROR, 2, 1, 3)
CLOSED = BreakerView("closed", None, None, 2, 0, 0)
HAND_OFF = "HTTP 503 Service Unavailable: upstream connect error or disconnect/reset before headers"
RUNBOOK = "https://git.example.com/hifi/blob/main/docs/alerts.md"
WIDTHS = (1280, 1920)
_OVERFLOW = """() => {
  const panel = document.getElementById("health-panel").getBoundingClientRect();
  const out = [];
  for (const e of document.querySelectorAll("#health-panel *")) {
    if (e.hidden) continue;
    const r = e.getBoundingClientRect();
    if (r.left < panel.left - 0.5 || r.right > panel.right + 0.5 || e.scrollWidth > e.clientWidth + 1)
      out.push(`${e.tagName}#${e.id} ${r.left}-${r.right} in ${panel.left}-${panel.right}`);
  }
  return out;
}"""
_CUT = """() => [...document.querySelectorAll("#recent td.err, #failures td.err")]
  .filter((td) => td.scrollWidth > td.clientWidth || td.scrollHeight > td.clientHeight)
  .map((td) => `${td.closest("table").id}: ${td.scrollWidth}x${td.scrollHeight}`
    + ` in ${td.clientWidth}x${td.clientHeight}`)"""
_ROW_RIGHTS = """() => ["failures-panel", "accounting-panel"].map(
  (id) => document.getElementById(id).getBoundingClientRect().right)"""


def _overview(runbook: str | None) -> dict[str, Any]:
    hand_offs = [
        {"age_s": 5 + i, "at": f"2026-09-21T12:00:0{i}Z", "attempt": 2, "status": "503"}
        | {"error": HAND_OFF}
        for i in range(5)
    ]
    tiers = {"recent_failures": hand_offs, "recent_failures_window_s": 300}
    groups = [{"status": "503", "error": HAND_OFF, "count": 5}]
    dlq = {"ready": True, "by_reason": {}, "growth_bucket_s": 60, "growth": []}
    return {
        "now_ms": NOW_MS,
        "can_act": False,
        "has_token": False,
        "letters_need_token": False,
        "auditor": "http://auditor.test",
        "runbook": runbook_links(runbook),
        "reasons": [],
        "destinations": {
            DEST: {"tiers": tiers, "dlq": dlq | {"failure_groups": groups}, "replays": []}
        },
    }


def _minute(minute_ms: int, missing: int) -> dict[str, Any]:
    """A final minute the auditor judged down for loss, with `missing` events missing now."""
    row = {"minute_ms": minute_ms, "entered": 100, "delivered": 100 - missing, "missing": missing}
    counts = {"dead_lettered": 0, "dead_lettered_by_reason": {}, "filtered": 0, "in_retry": 0}
    lags = {"duplicates": 0, "lag_p50_ms": 100, "lag_p95_ms": 200, "lag_p99_ms": 300}
    return report_row(row | counts | lags | {"final": True, "up": False, "down_reason": "loss"})


def _accounting(breaker: BreakerView) -> dict[str, Any]:
    """`/api/accounting` as the feed answers it: the destination's health from the auditor,
    a minute whose missing events turned up late and one that lost 2."""
    health = DestinationHealth(None, 300, 0, 0, None, 0, 0, None, 0, breaker)
    availability = {"minutes": 2, "up_minutes": 0, "down_for_loss": 1, "down_for_lag": 1}
    minute = NOW_MS - NOW_MS % MINUTE_MS - 10 * MINUTE_MS
    return {
        "available": True,
        "final_before_ms": None,
        "lag_sla_s": 60,
        "rows": [_minute(minute, 0), _minute(minute + MINUTE_MS, 2)],
        "availability": availability | {"pending_minutes": 0, "availability_pct": None},
        "health": panel_health(health),
    }


async def _fits(page: Any) -> None:
    """At each width the breaker's line stays in its panel, every hand-off error is shown
    whole, and the first row of panels takes the page's width."""
    for width in WIDTHS:
        await page.set_viewport_size({"width": width, "height": 900})
        assert await page.evaluate(_OVERFLOW) == [], width
        assert await page.evaluate(_CUT) == [], width
        failures_right, page_right = await page.evaluate(_ROW_RIGHTS)
        assert abs(failures_right - page_right) <= 1, (width, failures_right, page_right)


async def test_the_health_panel_during_an_outage() -> None:
    """The page's health panel shows "circuit breaker: open since ... on 1 of 2 replicas:
    HTTP 401 ..." in red, inside its panel, while the auditor says open; the hand-offs'
    errors read whole; the minute whose missing events turned up says "down (late)"; each
    panel links its alert's runbook entry. Once closed, and without a runbook base, the line
    and the links are gone."""
    shown: dict[str, Any] = {"breaker": OPEN, "runbook": RUNBOOK}

    async def answer(route: Any) -> None:
        path = route.request.url.removeprefix(ORIGIN).split("?", 1)[0]
        if path == "/":
            await route.fulfill(path=STATIC_DIR / "index.html")
        elif path.startswith("/static/"):
            await route.fulfill(path=STATIC_DIR / path.removeprefix("/static/"))
        elif path == "/api/overview":
            await route.fulfill(json=_overview(shown["runbook"]))
        elif path == "/api/accounting":
            await route.fulfill(body=orjson.dumps(_accounting(shown["breaker"])))
        else:
            await route.fulfill(json={"rows": [], "total": 0, "next": None})

    async with chromium() as browser:
        page = await browser.new_page()
        await page.route(f"{ORIGIN}/**", answer)
        await page.goto(f"{ORIGIN}/")
        line = page.locator("#health-breaker")
        await expect(line).to_be_visible(timeout=10_000)
        await expect(line).to_contain_text("open since")
        await expect(line).to_contain_text("on 1 of 2 replicas: HTTP 401 Unauthorized")
        await expect(line).to_have_class("bad")
        await expect(page.locator("#breaker-label")).to_be_visible()
        await expect(page.locator("#recent td.err")).to_have_text([HAND_OFF] * 5)
        await expect(page.locator("#minutes tbody tr td:last-child")).to_have_text(
            ["down (loss)", "down (late)"]
        )
        for panel, anchor in (
            ("breaker", "hifibreakeropen"),
            ("loss", "hifilossinfinalminute"),
            ("availability", "hifiavailabilitybudgetburn"),
            ("dlq", "hifideadletterqueuegrowing"),
            ("retry_age", "hifiretryagenearmax"),
        ):
            link = page.locator(f"#runbook-{panel}")
            await expect(link).to_be_visible()
            await expect(link).to_have_attribute("href", f"{RUNBOOK}#{anchor}")
        await _fits(page)
        shown.update(breaker=CLOSED, runbook=None)
        await expect(line).to_be_hidden(timeout=15_000)
        await expect(page.locator("#breaker-label")).to_be_hidden()
        await expect(page.locator("a.runbook:visible")).to_have_count(0)
