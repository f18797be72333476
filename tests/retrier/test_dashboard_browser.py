"""The retrier's dashboard in a real browser (Playwright driving Debian's chromium) against a
real connector, retrier and auditor: an outage fills the tiers on the page and shows in the
destination's health, dead letters are filtered, counted and replayed from it, one is found by
its id, and an action without the token is refused."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from playwright.async_api import expect

from devstack.destination import TestDestination
from devstack.ports import free_port
from devstack.processes import start_daemon
from hifi.audit import AUDIT_TOPIC_ENV_VAR
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings
from retrier.dashboard.access import TOKEN_ENV
from tests.helpers import make_destination, until, wait_exit
from tests.retrier.support import chromium

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.slow]

TOKEN = "Tq7-browser-9fK2xLm4Zp8Wv3"
REJECTED = [f"p-{i}" for i in range(6)]
DURING_OUTAGE = [f"o-{i}" for i in range(20)]
BEFORE_OUTAGE = [f"b-{i}" for i in range(30)]


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with chromium() as launched:
        yield launched


async def _produce(settings: KafkaSettings, topic: str, ids: list[str]) -> None:
    async with open_producer(settings) as producer:
        await producer.send_all(
            [(topic, None, orjson.dumps(event), []) for event in events_of(ids)]
        )


async def _tiers_waiting(page: Any) -> bool:
    cells = await page.locator("#tiers tbody td.n").all_text_contents()
    return any(cell.replace(",", "").isdigit() and int(cell.replace(",", "")) > 0 for cell in cells)


async def _eventually(page: Any, check: Any, timeout_s: float) -> bool:
    for _ in range(int(timeout_s * 4)):
        if await check(page):
            return True
        await asyncio.sleep(0.25)
    return False


def events_of(ids: list[str]) -> list[dict[str, Any]]:
    return [{"id": event_id, "payload": "x" * 50} for event_id in ids]


def _daemon(
    module: str, args: list[str], bootstrap: str, log: Path, audit_topic: str
) -> subprocess.Popen[bytes]:
    os.environ[TOKEN_ENV] = TOKEN
    os.environ[AUDIT_TOPIC_ENV_VAR] = audit_topic  # this test's facts only
    try:
        return start_daemon(module, args, bootstrap=bootstrap, log_path=log)
    finally:
        del os.environ[TOKEN_ENV]
        del os.environ[AUDIT_TOPIC_ENV_VAR]


async def test_outage_filter_replay_find_and_refusal_in_the_browser(
    browser: Any,
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """The page an operator keeps open during an incident does what the issue asks of it."""
    make_destination(
        catalog_dir,
        unique,
        destination.url,
        f"{unique}.src",
        retry_tiers_s=[3, 30],
        local_retry_attempts=1,
        max_batch_records=10,
    )
    args = ["--dest", unique, "--catalog", str(catalog_dir)]
    bootstrap = kafka_settings.bootstrap
    port, auditor_port, audit_topic = free_port(), free_port(), f"{unique}.audit"
    auditor = _daemon(
        "auditor",
        [*args, "--metrics-port", str(auditor_port), "--archive", str(tmp_path / "archive")],
        bootstrap,
        tmp_path / "a.log",
        audit_topic,
    )
    auditor_url = f"http://127.0.0.1:{auditor_port}"
    retrier = _daemon(
        "retrier",
        [*args, "--metrics-port", str(port), "--auditor-url", auditor_url],
        bootstrap,
        tmp_path / "r.log",
        audit_topic,
    )
    connector = _daemon(
        "connector", [*args, "--metrics-port", "0"], bootstrap, tmp_path / "c.log", audit_topic
    )
    processes.extend([retrier, connector, auditor])
    base = f"http://127.0.0.1:{port}"
    try:
        # dead letters: the destination refuses these events themselves (400, isolated)
        destination.reject_ids(REJECTED)
        await _produce(kafka_settings, f"{unique}.src", REJECTED)
        assert await until(lambda: destination.request_count > 0, 60)

        page = await browser.new_page()
        await page.goto(f"{base}/?dest={unique}")
        await page.fill("#operator", "alice")
        await page.fill("#token", TOKEN)
        await page.click("#token-form button")
        await expect(page.locator("#dlq-size")).to_have_text("6", timeout=60_000)

        # delivered events: the auditor's loss-and-lag chart gets its minute's p95 lag
        await _produce(kafka_settings, f"{unique}.src", BEFORE_OUTAGE)
        assert await destination.wait_for_ids(BEFORE_OUTAGE, 60)
        await expect(page.locator("#minutes tbody")).to_contain_text(" ms", timeout=30_000)
        # today's availability says over how many final minutes, since the auditor counts
        over = re.compile(r"today \S+ over \d+ final minutes?")
        await expect(page.locator("#availability")).to_contain_text(over, timeout=30_000)

        # an outage: hand-offs fill the tiers, and the page shows them waiting
        await destination.set_down(True)
        await _produce(kafka_settings, f"{unique}.src", DURING_OUTAGE)
        assert await _eventually(page, _tiers_waiting, 60), "the tiers never filled on the page"
        # HIFI_DASHBOARD_SCREENSHOT=docs/dashboard.png refreshes the README's picture
        shot = os.environ.get("HIFI_DASHBOARD_SCREENSHOT") or str(tmp_path / "outage.png")
        await page.set_viewport_size({"width": 1280, "height": 900})
        await page.screenshot(path=shot, full_page=True)
        await destination.set_down(False)
        assert await destination.wait_for_ids(DURING_OUTAGE, 90)
        since_start = re.compile(r"\((\d{3,}|[2-9]\d) since start\)")  # 20 re-offered at least
        await expect(page.locator("#reoffer-rate")).to_contain_text(since_start, timeout=15_000)

        # the destination's health, from the auditor: failed requests in red, a 2xx just now
        await expect(page.locator("#failed-share")).to_have_class("bad", timeout=30_000)
        await expect(page.locator("#health-requests")).to_contain_text("failed of")
        await expect(page.locator("#last-2xx")).to_contain_text("ago")

        # filter by reason, see the count, confirm, and the events arrive
        destination.reset_script()
        await page.select_option("#f-reason", "http_4xx")
        await page.click("#filters button[type=submit]")
        await expect(page.locator("#match-count")).to_have_text("6")
        rows = await page.locator("#letter-list tbody tr").count()
        assert rows == 6
        await page.click("#replay-matching")
        await expect(page.locator("#c-text")).to_contain_text("Replay 6 dead letters")
        await page.click("#c-yes")
        await expect(page.locator("#c-result")).to_have_text("replayed 6", timeout=60_000)
        assert await destination.wait_for_ids(REJECTED, 60)
        await page.click("#c-no")
        await expect(page.locator("#letter-list tbody tr")).to_have_count(6)
        await expect(
            page.locator("#letter-list tbody tr").filter(has_text="by alice@")
        ).to_have_count(6)

        # a second replay of the same filter skips what was replayed
        await page.click("#replay-matching")
        await expect(page.locator("#c-text")).to_contain_text("Replay 0 dead letters")
        await expect(page.locator("#c-skipped")).to_contain_text("6 already replayed are skipped")
        await page.click("#c-no")

        # search by id finds one letter, and it opens with its history
        await page.fill("#find-key", "p-3")
        await page.click("#find button")
        await expect(page.locator("#match-count")).to_have_text("1")
        await page.click("#letter-list tbody tr a")
        await expect(page.locator("#l-body")).to_contain_text('"id": "p-3"')
        await expect(page.locator("#l-history")).to_contain_text("400")
        await page.click("#l-close")

        # without the token: the page offers no action and the server refuses one
        stranger = await browser.new_page()
        await stranger.goto(f"{base}/?dest={unique}")
        await expect(stranger.locator("#mode")).to_contain_text("enter the token")
        assert await stranger.is_disabled("#replay-matching")
        refused = await stranger.request.post(
            f"{base}/api/replays", data={"dest": unique, "dry_run": False}
        )
        assert refused.status == 401
        forged = await stranger.request.post(
            f"{base}/api/replays",
            data={"dest": unique, "dry_run": True},
            headers={"X-Hifi-Token": TOKEN, "Origin": "https://evil.example"},
        )
        assert forged.status == 403
    finally:
        for process in (connector, retrier, auditor):
            process.send_signal(signal.SIGTERM)
        for process in (connector, retrier, auditor):
            await wait_exit(process, 60)
    log = (tmp_path / "r.log").read_text()
    assert "dashboard_replay" in log
    assert TOKEN not in log
