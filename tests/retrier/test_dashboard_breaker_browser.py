"""The breaker's line on the dashboard's page in a real browser: red while open, gone once closed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from playwright.async_api import expect

from auditor.client import BreakerView, DestinationHealth
from retrier.dashboard.api import STATIC_DIR
from retrier.dashboard.auditor_feed import panel_health
from tests.retrier.support import chromium

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ORIGIN = "http://dashboard.test"
OPEN = BreakerView("open", 1_790_000_000_000, "HTTP 401 Unauthorized", 2, 1, 0)
CLOSED = BreakerView("closed", None, None, 2, 0, 0)


def _overview() -> dict[str, Any]:
    dlq = {"ready": True, "by_reason": {}, "growth_bucket_s": 60, "growth": []}
    return {
        "now_ms": 1_790_000_200_000,
        "can_act": False,
        "has_token": False,
        "letters_need_token": False,
        "auditor": "http://auditor.test",
        "reasons": [],
        "destinations": {"shop": {"tiers": {}, "dlq": dlq | {"failure_groups": []}, "replays": []}},
    }


def _accounting(breaker: BreakerView) -> dict[str, Any]:
    """`/api/accounting` as the feed answers it, with the destination's health from the
    auditor (no minutes yet)."""
    health = DestinationHealth(None, 300, 0, 0, None, 0, 0, None, 0, breaker)
    availability = {"minutes": 0, "up_minutes": 0, "down_for_loss": 0, "down_for_lag": 0}
    return {
        "available": True,
        "final_before_ms": None,
        "lag_sla_s": 60,
        "rows": [],
        "availability": availability | {"pending_minutes": 0, "availability_pct": None},
        "health": panel_health(health),
    }


async def test_the_breaker_line_is_red_while_open_and_gone_once_closed() -> None:
    """The page's health panel shows "circuit breaker: open since ... on 1 of 2 replicas:
    HTTP 401 ..." in red while the auditor says open; once it says closed the line is gone."""
    shown = {"breaker": OPEN}

    async def answer(route: Any) -> None:
        path = route.request.url.removeprefix(ORIGIN).split("?", 1)[0]
        if path == "/":
            await route.fulfill(path=STATIC_DIR / "index.html")
        elif path.startswith("/static/"):
            await route.fulfill(path=STATIC_DIR / path.removeprefix("/static/"))
        elif path == "/api/overview":
            await route.fulfill(json=_overview())
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
        shown["breaker"] = CLOSED
        await expect(line).to_be_hidden(timeout=15_000)
        await expect(page.locator("#breaker-label")).to_be_hidden()
