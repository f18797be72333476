"""The dashboard's retry panel in a real browser, served by a running retrier over the real
broker: what waits in each stage, NAME.retry_out included, and in all."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from playwright.async_api import expect

from devstack.kafka_tools import move_committed, read_topic
from hifi.kafka.settings import KafkaSettings
from retrier.daemon import Retrier
from tests.helpers import make_destination, running, until
from tests.retrier.support import chromium, create_topics, handoff, produce_all

pytestmark = [pytest.mark.integration, pytest.mark.browser]


async def test_the_retry_panel_shows_every_stage_and_the_total(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """3 hand-offs wait out tier 0 and 4 of 6 re-offers wait in NAME.retry_out (the connector's
    group committed 2): the panel lists retry_in 0, tier 0 3, retry_out 4, in that order, and
    7 in retry in all."""
    dest = make_destination(catalog_dir, unique, "https://x.test/", unique, retry_tiers_s=[600])
    await create_topics(kafka_settings, dest)
    now_ms = int(time.time() * 1000)
    records = [handoff(dest, f"in-{i}", attempt=1, handoff_ms=now_ms) for i in range(3)]
    records += [
        (dest.retry_out_topic, *handoff(dest, f"o-{i}", attempt=1, handoff_ms=now_ms)[1:])
        for i in range(6)
    ]
    await produce_all(kafka_settings, records)
    partitions = Counter(
        r.partition for r in await read_topic(kafka_settings, dest.retry_out_topic)
    )
    fullest = max(partitions, key=lambda p: partitions[p])
    await move_committed(kafka_settings, dest.connector_group, dest.retry_out_topic, fullest, 2)
    retrier = Retrier([dest], kafka_settings, metrics_port=0, group_id=f"{unique}.retrier")
    async with running(retrier), chromium() as browser:
        assert await until(lambda: retrier.ops is not None and retrier.ops.ready, 30)
        assert retrier.ops is not None
        page = await browser.new_page()
        await page.goto(f"http://127.0.0.1:{retrier.ops.port}/?dest={unique}")
        total = page.locator("#waiting-total")
        await expect(total).to_have_text("7", timeout=30_000)
        rows = page.locator("#tiers tbody tr")
        await expect(rows).to_have_text(
            [
                "retry_in: handed off, not yet routed0",
                "tier 0: waiting out its delay3",
                "retry_out: re-offered, not yet taken back4",
                "in retry, all stages7",
            ]
        )
