"""What an operator sees of a running connector: series at 0 from the first scrape, /status, the progress line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest
from structlog.testing import capture_logs

from connector import metrics
from connector.daemon import Connector
from connector.status_page import Progress, percentile_s
from devstack.destination import TestDestination
from devstack.kafka_tools import produce_events
from hifi.kafka.settings import KafkaSettings
from hifi.vocabulary import Outcome
from tests.helpers import events, make_destination, until

pytestmark = [pytest.mark.integration]


async def _get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.get(url)


async def test_first_scrape_has_every_series_and_status_tells_the_story(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Before any event every outcome and reason counter is there at 0 with hifi_build_info;
    after a run /status counts what was delivered and dead-lettered and lists the failure."""
    dest = make_destination(catalog_dir, unique, destination.url, unique, max_batch_records=10)
    connector = Connector(dest, kafka_settings, metrics_port=0)
    ops = connector.ops
    assert ops is not None
    task = asyncio.create_task(connector.run())
    try:
        assert await until(lambda: ops.ready, 60, interval_s=0.05)
        base = f"http://127.0.0.1:{ops.port}"
        first = (await _get(f"{base}/metrics")).text
        for outcome in ("delivered", "handed_off", "dead_lettered"):
            assert (
                f'hifi_connector_records_total{{dest="{unique}",outcome="{outcome}"}} 0.0' in first
            )
        for reason in ("http_4xx", "redirect", "malformed", "too_large", "expired"):
            assert (
                f'hifi_connector_dead_letters_total{{dest="{unique}",reason="{reason}"}} 0.0'
                in first
            )
        assert 'hifi_build_info{component="connector"' in first
        destination.reject_ids({"e-3"}, status=400)
        await produce_events(kafka_settings, unique, events(20))
        assert await destination.wait_for_ids([f"e-{i}" for i in range(20) if i != 3], 60)
        for _ in range(200):
            page = orjson.loads((await _get(f"{base}/status")).content)
            if page["totals"]["dead_lettered"] == 1:
                break
            await asyncio.sleep(0.05)
    finally:
        connector.request_stop()
        await asyncio.wait_for(task, 60)
    assert page["dest"] == unique
    assert page["ready"] is True
    assert page["totals"]["delivered"] == 19
    assert page["totals"]["dead_lettered_by_reason"]["http_4xx"] == 1
    assert page["health"]["last_delivered"] is not None
    assert page["health"]["requests"]["4xx"] >= 1
    (failure,) = [f for f in page["recent_failures"] if f["outcome"] == "dead_lettered"]
    assert (failure["status"], failure["reason"], failure["events"]) == (400, "http_4xx", 1)


def test_percentile_is_the_upper_bound_of_the_bucket() -> None:
    """The p95 of bucket counts is the upper bound of the bucket where 95 % is reached."""
    bounds = (0.1, 0.5, 1.0, float("inf"))
    assert percentile_s([0, 0, 0, 0], bounds, 0.95) is None
    assert percentile_s([90, 5, 5, 0], bounds, 0.95) == 0.5
    assert percentile_s([90, 4, 5, 1], bounds, 0.95) == 1.0


def test_progress_line_says_what_the_minute_did() -> None:
    """Each window's line holds that window's delivered, handed off and dead-lettered counts."""
    name = "progress-unit"
    metrics.create_series(name, audit=False)
    progress = Progress(name, every_s=0.0)
    metrics.RECORDS.labels(name, Outcome.DELIVERED).inc(7)
    metrics.RECORDS.labels(name, Outcome.DEAD_LETTERED).inc(2)
    metrics.LAG_OUT.labels(name, "first").observe_ages(10_000.0, [9_900.0] * 7)
    with capture_logs() as logs:
        progress.tick()
        metrics.RECORDS.labels(name, Outcome.DELIVERED).inc(1)
        progress.tick()
    lines = [entry for entry in logs if entry["event"] == "progress"]
    assert [(e["delivered"], e["handed_off"], e["dead_lettered"]) for e in lines] == [
        (7, 0, 2),
        (1, 0, 0),
    ]
    assert lines[0]["lag_p95_s"] == 0.1


async def test_a_source_topic_that_does_not_exist_is_a_warning_at_start(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """A connector whose source topic is missing says so at start instead of idling silently."""
    dest = make_destination(catalog_dir, unique, "http://127.0.0.1:9/", f"{unique}.absent")
    with capture_logs() as logs:
        await asyncio.wait_for(Connector(dest, kafka_settings, until_idle_s=1.0).run(), 60)
    (warning,) = [entry for entry in logs if entry["event"] == "source_topic_missing"]
    assert (warning["topic"], warning["log_level"]) == (f"{unique}.absent", "warning")
