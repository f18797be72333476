"""The dashboard's loss-and-lag chart in a real browser (Playwright driving Debian's chromium):
with 1, 10, 200 and 1,440 minutes of an auditor's data, every bar is drawn inside the chart's
box and its panel, the box keeps its height, and the bars stand in time order.

The page is the real retrier's (in-process, on the real broker), fed through its real auditor
feed by an auditor-like ops server in-process that answers `/tables` with rows in the auditor's
own row format (`hifi.accounting.tables.report_row`) and `/status` as the auditor does."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.requests import Request

from config.destination import Accounting, Destination
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.tables import parse_minute, report_row
from hifi.kafka.settings import KafkaSettings
from hifi.ops_http import OpsServer
from retrier.daemon import DashboardOptions, Retrier
from tests.helpers import make_destination, until
from tests.retrier.support import chromium, create_topics

pytestmark = [pytest.mark.integration, pytest.mark.browser]

DATA_MINUTES = [1, 10, 200, 1440]
SLA_S = 1.0
TOLERANCE_PX = 0.5
_GEOMETRY = """() => {
  const edges = (r) => [r.left, r.top, r.right, r.bottom];
  const box = document.getElementById("lag-chart");
  const svg = box.querySelector("svg");
  return {
    panel: edges(box.closest(".panel").getBoundingClientRect()),
    box: edges(box.getBoundingClientRect()),
    svg: svg ? edges(svg.getBoundingClientRect()) : null,
    bars: [...box.querySelectorAll("svg rect")].map((r) => edges(r.getBoundingClientRect())),
    line: [...box.querySelectorAll("svg line")].map((l) => edges(l.getBoundingClientRect())),
  };
}"""


def _rows(minutes: int, now_ms: int) -> list[dict[str, Any]]:
    """`minutes` rows up to now as the auditor's `/tables` gives them: lags of a few hundred ms
    with some over the SLA, the last two provisional, every 17th minute down for loss."""
    last = now_ms - now_ms % MINUTE_MS
    rows = []
    for i in range(minutes):
        minute_ms = last - (minutes - 1 - i) * MINUTE_MS
        final = i < minutes - 2
        down = final and i % 17 == 5
        lag_ms = 200 + (i * 37) % 1500
        rows.append(
            report_row(
                {
                    "minute_ms": minute_ms,
                    "entered": 100,
                    "delivered": 99 if down else 100,
                    "dead_lettered": 0,
                    "dead_lettered_by_reason": {},
                    "filtered": 0,
                    "in_retry": 0,
                    "missing": 1 if down else 0,
                    "duplicates": 0,
                    "lag_p50_ms": lag_ms // 2,
                    "lag_p95_ms": lag_ms,
                    "lag_p99_ms": lag_ms + 50,
                    "final": final,
                    "up": None if not final else not down,
                    "down_reason": "loss" if down else None,
                }
            )
        )
    return rows


class _AuditorLike:
    """`/tables` and `/status` of an auditor holding `minutes` minutes per destination."""

    def __init__(self, minutes_by_dest: dict[str, int]) -> None:
        self.minutes_by_dest = minutes_by_dest
        self.settings = Accounting(lag_sla_s=SLA_S).model_dump()

    async def tables(self, request: Request) -> Any:
        now_ms = int(time.time() * 1000)
        wanted = request.query_params.get("dest")
        from_ms = int(request.query_params.get("from") or 0)
        return {
            name: [row for row in _rows(n, now_ms) if _minute_ms(row) >= from_ms]
            for name, n in self.minutes_by_dest.items()
            if wanted in (None, name)
        }

    async def status(self, request: Request) -> Any:
        now_ms = int(time.time() * 1000)
        final_before_ms = now_ms - now_ms % MINUTE_MS - MINUTE_MS
        return {
            "dests": {
                name: {"final_before_ms": final_before_ms, "settings": self.settings}
                for name in self.minutes_by_dest
            }
        }


def _minute_ms(row: dict[str, Any]) -> int:
    return parse_minute(row["minute"])


@pytest.fixture(scope="module")
async def page_base(
    kafka_settings: KafkaSettings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, dict[int, str]]]:
    """The retrier's page, with a destination per amount of data, and its auditor-like feed."""
    catalog_dir = tmp_path_factory.mktemp("catalog")
    prefix = f"lag{uuid.uuid4().hex[:8]}"
    names = {n: f"{prefix}-m{n}" for n in DATA_MINUTES}
    dests: list[Destination] = [
        make_destination(catalog_dir, name, "https://x.test/", f"{name}.src")
        for name in names.values()
    ]
    await create_topics(kafka_settings, *dests)
    auditor = OpsServer(port=0, component="auditor")
    feed = _AuditorLike({name: n for n, name in names.items()})
    auditor.serve_json("/tables", feed.tables)
    auditor.serve_json("/status", feed.status)
    auditor.ready = True
    async with auditor.running():
        retrier = Retrier(
            dests,
            kafka_settings,
            metrics_port=0,
            group_id=f"{prefix}.retrier",
            dashboard=DashboardOptions(auditor_url=f"http://127.0.0.1:{auditor.port}"),
        )
        task = asyncio.create_task(retrier.run())
        try:
            assert await until(lambda: retrier.ops is not None and retrier.ops.ready, 60)
            assert retrier.ops is not None
            yield f"http://127.0.0.1:{retrier.ops.port}", names
        finally:
            retrier.request_stop()
            await asyncio.wait_for(task, 60)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    """One chromium for every case."""
    async with chromium() as launched:
        yield launched


def _inside(inner: list[float], outer: list[float]) -> bool:
    left, top, right, bottom = inner
    o_left, o_top, o_right, o_bottom = outer
    return (
        left >= o_left - TOLERANCE_PX
        and top >= o_top - TOLERANCE_PX
        and right <= o_right + TOLERANCE_PX
        and bottom <= o_bottom + TOLERANCE_PX
    )


@pytest.mark.parametrize("minutes", DATA_MINUTES)
async def test_every_bar_of_the_lag_chart_is_inside_its_panel(
    browser: Any, page_base: tuple[str, dict[int, str]], minutes: int
) -> None:
    """Whatever the amount of data, the chart's bars are drawn in its box, in its panel."""
    base, names = page_base
    dest = names[minutes]
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        accounting = await page.request.get(f"{base}/api/accounting?dest={dest}")
        lags_ms = [row["lag_p95_ms"] for row in (await accounting.json())["rows"]]
        shown = len(lags_ms)  # the feed gives the last 3 hours
        assert min(minutes, 180) <= shown <= minutes
        await page.goto(f"{base}/?dest={dest}")
        bars = page.locator("#lag-chart svg rect")
        # the chart is the last 181 minutes up to now: the feed's oldest minute may just be out
        drawn = shown if minutes < 180 else shown - 1
        for _ in range(120):
            if await bars.count() >= drawn:
                break
            await asyncio.sleep(0.25)
        found = await page.evaluate(_GEOMETRY)
    finally:
        await page.close()
    box, panel = found["box"], found["panel"]
    assert drawn <= len(found["bars"]) <= shown
    assert found["svg"] is not None
    assert _inside(found["svg"], box), (found["svg"], box)
    assert _inside(box, panel), (box, panel)
    outside = [bar for bar in found["bars"] if not _inside(bar, box)]
    assert not outside, (
        f"{len(outside)} of {shown} bars outside the chart's box {box}: {outside[:3]}"
    )
    assert all(_inside(line, box) for line in found["line"]), (found["line"], box)
    height = box[3] - box[1]
    assert height >= 100, f"the chart's box is {height} px high"
    # the tallest bar stands as high as its lag says, against the SLA line when that is higher
    tallest = max(bar[3] - bar[1] for bar in found["bars"])
    charted = lags_ms[-len(found["bars"]) :]
    expected = max(charted) / max(SLA_S * 1000, *charted) * (118 / 120) * height
    assert abs(tallest - expected) <= 2, f"the tallest bar is {tallest} px, not {expected}"
    lefts = [bar[0] for bar in found["bars"]]
    assert lefts == sorted(lefts), "the bars run back in time"
    assert len(set(lefts)) == len(lefts), "bars stand on each other"
    slot_px = (box[2] - box[0]) / 181
    # the newest minute stands at the right edge, or one slot left of it when the clock's minute
    # turned between writing the rows and drawing them
    assert found["bars"][-1][2] >= box[2] - 2 * slot_px, "the minute now is not at the right edge"
    widths = [bar[2] - bar[0] for bar in found["bars"]]
    assert max(widths) <= (box[2] - box[0]) / 100, "a bar is wider than a minute of 3 hours"
