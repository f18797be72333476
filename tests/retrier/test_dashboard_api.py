"""The dashboard's JSON against a running retrier and the real broker: overview, paging, filters,
find, one letter masked, bad input as one-line 400s, dry run then replay with marks."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from config.destination import Destination
from hifi import redaction
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from retrier.daemon import DashboardOptions, Retrier
from retrier.dlq import read_dead_letters, replay_with
from retrier.replays import ReplayFilter
from tests.helpers import make_destination, until
from tests.retrier.support import create_topics, handoff, id_of, produce_all

pytestmark = pytest.mark.integration

TOKEN = "Pz3-Hk71-Qn6Ws2Ue-Jd4"
SECRET = "sk-live-0123456789abcdef"


@contextlib.asynccontextmanager
async def _running(retrier: Retrier) -> AsyncIterator[str]:
    task = asyncio.create_task(retrier.run())
    try:
        assert retrier.ops is not None
        assert await until(lambda: retrier.ops is not None and retrier.ops.ready, 60)
        yield f"http://127.0.0.1:{retrier.ops.port}"
    finally:
        retrier.request_stop()
        await asyncio.wait_for(task, 60)


async def _letters(settings: KafkaSettings, dest: Destination, count: int) -> None:
    now_ms = int(time.time() * 1000)
    letters = []
    for i in range(count):
        _, key, value, headers = handoff(dest, f"ev-{i}", attempt=2, handoff_ms=now_ms)
        reason = b"http_4xx" if i % 3 == 0 else b"expired"
        if i == 7:
            value = b'{"id":"ev-7","note":"token ' + SECRET.encode() + b'"}'
        letters.append((dest.dlq_topic, key, value, [*headers, ("hifi-reason", reason)]))
    await produce_all(settings, letters)


async def test_dashboard_api_end_to_end(
    kafka_settings: KafkaSettings,
    catalog_dir: Path,
    unique: str,
) -> None:
    dest = make_destination(catalog_dir, unique, "https://x.test/", f"{unique}.src")
    await create_topics(kafka_settings, dest)
    await _letters(kafka_settings, dest, 30)
    redaction.register([SECRET])
    retrier = Retrier(
        [dest],
        kafka_settings,
        metrics_port=0,
        group_id=f"{unique}.retrier",
        dashboard=DashboardOptions(
            token=TOKEN, runbook_url="https://docs.example.com/hifi/alerts.html"
        ),
    )
    async with _running(retrier) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert await _until_indexed(http, unique, 30)
        overview = (await http.get("/api/overview")).json()
        dlq = overview["destinations"][unique]["dlq"]
        assert dlq["by_reason"] == {"http_4xx": 10, "expired": 20}
        assert sum(dlq["growth"]) == 30
        assert overview["can_act"] is True
        assert overview["has_token"] is False
        runbook = overview["runbook"]  # the panels' links: the base and each alert's anchor
        assert runbook["breaker"] == "https://docs.example.com/hifi/alerts.html#hifibreakeropen"
        assert runbook["dlq"].endswith("#hifideadletterqueuegrowing")

        page = (await http.get("/api/letters", params={"dest": unique, "limit": 12})).json()
        assert page["total"] == 30
        second = (
            await http.get(
                "/api/letters", params={"dest": unique, "limit": 12, "cursor": page["next"]}
            )
        ).json()
        seen = [(r["partition"], r["offset"]) for r in page["rows"] + second["rows"]]
        assert len(set(seen)) == 24
        times = [r["dead_ms"] for r in page["rows"] + second["rows"]]
        assert times == sorted(times, reverse=True)

        counted = await http.get(
            "/api/letters/count", params={"dest": unique, "reason": "http_4xx"}
        )
        assert counted.json()["count"] == 10
        found = (await http.get("/api/find", params={"dest": unique, "key": "ev-7"})).json()
        (row,) = found["rows"]
        assert SECRET not in str(row)
        opened = await http.get(
            "/api/letter",
            params={"dest": unique, "partition": row["partition"], "offset": row["offset"]},
        )
        assert opened.status_code == 200
        assert SECRET not in opened.text
        assert "***" in opened.json()["body"]

        for params, needle in (
            ({"dest": "nope"}, "dest 'nope': not served"),
            ({"dest": unique, "limit": "many"}, "limit 'many': not a whole number"),
            ({"dest": unique, "cursor": "garbage"}, "cursor: not one this dashboard gave"),
            ({"dest": unique, "from": "yesterday"}, "from: "),
            ({"dest": unique, "reason": "bored"}, "reason 'bored': not a dead-letter reason"),
        ):
            answer = await http.get("/api/letters", params=params)
            assert answer.status_code == 400, params
            assert needle in answer.json()["error"], answer.json()

        headers = {"X-Hifi-Token": TOKEN, "X-Hifi-Operator": "bob"}
        selection = {"dest": unique, "filter": {"reason": "http_4xx"}}
        refused = await http.post("/api/replays", json={**selection, "dry_run": False})
        assert refused.status_code == 401
        dry = await http.post("/api/replays", json=selection, headers=headers)
        assert dry.json() == {"dry_run": True, "count": 10, "skipped_replayed": 0}
        started = await http.post(
            "/api/replays", json={**selection, "dry_run": False}, headers=headers
        )
        assert started.status_code == 202, started.text
        job = started.json()
        for _ in range(300):
            job = (await http.get(f"/api/replays/{job['id']}")).json()
            if job["state"] != "running":
                break
            await asyncio.sleep(0.1)
        assert (job["state"], job["replayed"], job["total"]) == ("done", 10, 10)
        again = await http.post("/api/replays", json=selection, headers=headers)
        assert again.json() == {"dry_run": True, "count": 0, "skipped_replayed": 10}
        marked = (await http.get("/api/letters", params={"dest": unique, "replayed": "yes"})).json()
        assert marked["total"] == 10
        assert all(r["replayed_by"].startswith("bob@") for r in marked["rows"])

        # a replay from the command line (another process) shows on the page too
        letters = await read_dead_letters(kafka_settings, dest, reason="expired")
        async with open_producer(kafka_settings) as producer:
            await replay_with(producer, dest, letters[:4], by="carol", filter=ReplayFilter())
        for _ in range(100):
            marked = (
                await http.get("/api/letters", params={"dest": unique, "replayed": "yes"})
            ).json()
            if marked["total"] == 14:
                break
            await asyncio.sleep(0.2)
        assert marked["total"] == 14
        assert sum(r["replayed_by"] == "carol" for r in marked["rows"]) == 4

        # one letter: counted on its own, and an offset the DLQ does not hold is a 404
        one = {"dest": unique, "letter": {"partition": row["partition"], "offset": row["offset"]}}
        dry_one = await http.post("/api/replays", json={**one, "again": True}, headers=headers)
        assert dry_one.json() == {"dry_run": True, "count": 1, "skipped_replayed": 0}
        absent = {"dest": unique, "letter": {"partition": 0, "offset": 10**9}}
        missing = await http.post("/api/replays", json=absent, headers=headers)
        assert missing.status_code == 404
        assert "no dead letter at" in missing.json()["error"]

    reoffered = await read_topic(kafka_settings, dest.retry_out_topic, at_least=14)
    by_dashboard = sorted(
        id_of(r) for r in reoffered if id_of(r) in {f"ev-{i}" for i in range(0, 30, 3)}
    )
    assert by_dashboard == sorted(f"ev-{i}" for i in range(0, 30, 3))
    replays = await read_topic(kafka_settings, dest.dlq_replays_topic, at_least=1)
    assert replays


async def _until_indexed(http: httpx.AsyncClient, dest: str, count: int) -> bool:
    for _ in range(300):
        answer = await http.get("/api/overview")
        dlq = answer.json()["destinations"][dest]["dlq"] if answer.status_code == 200 else {}
        if dlq.get("ready") and dlq["size"] >= count:
            return True
        await asyncio.sleep(0.1)
    return False
