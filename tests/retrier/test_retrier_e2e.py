"""The retrier with the connector, a real broker and a real HTTP destination, in this process."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import committed_offsets, produce_events, read_topic
from hifi.kafka.settings import KafkaSettings
from retrier.daemon import Retrier
from tests.helpers import events, make_destination, running
from tests.retrier.support import (
    SLACK_MS,
    collect,
    create_topics,
    due_ms,
    handoff,
    headers_of,
    id_of,
    produce_all,
    run_retrier_command,
)

pytestmark = [pytest.mark.integration]


async def test_outage_then_recovery_delivers_every_event_on_time(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """During an outage events wait out each tier (not early, within slack) and all arrive after it."""
    sent = events(30)
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        retry_tiers_s=[1, 3],
        local_retry_attempts=2,
        local_retry_max_backoff_s=0.01,
    )
    await create_topics(kafka_settings, dest)
    await destination.set_down(True)
    await produce_events(kafka_settings, unique, sent)
    retrier = Retrier([dest], kafka_settings, group_id=f"hifi.retrier.{unique}")
    async with running(Connector(dest, kafka_settings), retrier):
        handed = await collect(kafka_settings, dest.retry_in_topic, 2 * len(sent))
        await destination.set_down(False)
        assert await destination.wait_for_ids([e["id"] for e in sent], 60)

    assert {e["id"] for e in sent} - set(destination.delivered_ids()) == set()
    assert await read_topic(kafka_settings, dest.dlq_topic) == []
    handoffs: dict[str, dict[int, int]] = defaultdict(dict)
    for record in handed:
        headers = headers_of(record)
        handoffs[id_of(record)][int(headers["hifi-attempt"])] = int(headers["hifi-handoff-ms"])
    assert all(set(by_attempt) == {1, 2} for by_attempt in handoffs.values())
    assert all(h[2] - h[1] >= 1000 for h in handoffs.values())  # tier 0 held before the retry
    reoffered = await read_topic(kafka_settings, dest.retry_out_topic)
    assert {id_of(r) for r in reoffered} == {e["id"] for e in sent}
    for record in reoffered:
        assert 0 <= record.timestamp - due_ms(record, dest) <= SLACK_MS
    for delivery in destination.deliveries():
        assert delivery.received_ms >= handoffs[delivery.id][2] + 3000  # tier 1 held too
    committed = await committed_offsets(kafka_settings, retrier.group_id, dest.retry_in_topic)
    assert sum(offset or 0 for offset in committed.values()) == len(handed)


async def test_expired_events_are_dead_lettered_then_replayed(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Events outliving their tiers are dead-lettered with history; `dlq replay` then delivers them."""
    sent = events(20)
    dest = make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        retry_tiers_s=[1],
        local_retry_attempts=2,
        local_retry_max_backoff_s=0.01,
    )
    await create_topics(kafka_settings, dest)
    await destination.set_down(True)
    await produce_events(kafka_settings, unique, sent)
    retrier = Retrier([dest], kafka_settings, group_id=f"hifi.retrier.{unique}")
    async with running(Connector(dest, kafka_settings), retrier):
        dead = await collect(kafka_settings, dest.dlq_topic, len(sent))
        assert {id_of(r) for r in dead} == {e["id"] for e in sent}
        for record in dead:
            headers = headers_of(record)
            assert headers["hifi-reason"] == b"expired"
            assert headers["hifi-attempt"] == b"2"
            assert headers["hifi-origin"].startswith(f"{unique}/".encode())
            assert [h["attempt"] for h in orjson.loads(headers["hifi-history"])] == [1, 2]
            assert record.key == id_of(record).encode()
        await destination.set_down(False)
        args = ["dlq", "replay", "--dest", unique, "--catalog", str(catalog_dir)]
        bootstrap = kafka_settings.bootstrap
        code, out, _ = await run_retrier_command(*args, "--dry-run", bootstrap=bootstrap)
        assert (code, out.split()[:3]) == (0, ["would", "replay", "20"])
        code, out, err = await run_retrier_command(
            *args, "--reason", "expired", "--since", "10m", bootstrap=bootstrap
        )
        assert (code, out.split()[:2]) == (0, ["replayed", "20"]), err
        assert await destination.wait_for_ids([e["id"] for e in sent], 60)
    replayed = await read_topic(kafka_settings, dest.retry_out_topic)
    attempts = sorted(headers_of(r)["hifi-attempt"] for r in replayed)
    assert attempts == [b"0"] * len(sent) + [b"1"] * len(sent)


async def test_backlogged_destination_does_not_delay_another(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """Thousands waiting for one destination do not delay another's re-offers; /status shows both."""
    slow = make_destination(
        catalog_dir, f"{unique}-slow", "http://127.0.0.1:9/", unique, retry_tiers_s=[600]
    )
    fast = make_destination(
        catalog_dir, f"{unique}-fast", "http://127.0.0.1:9/", unique, retry_tiers_s=[1, 2]
    )
    await create_topics(kafka_settings, slow, fast)
    now_ms = int(time.time() * 1000)
    backlog = 10_000
    await produce_all(
        kafka_settings,
        (handoff(slow, f"s-{i}", attempt=1, handoff_ms=now_ms) for i in range(backlog)),
    )
    retrier = Retrier([slow, fast], kafka_settings, metrics_port=0, group_id=f"hifi.r.{unique}")
    async with running(retrier), httpx.AsyncClient() as client:
        base = await _ops_url(retrier)
        routed = {"retry_in": 0, "0": backlog, "retry_out": 0}  # all routed, all in tier 0
        slow_status = await _status_when(
            client, base, slow.name, lambda s: s["waiting_per_stage"] == routed
        )
        assert slow_status["waiting_per_tier"] == {"0": backlog}
        assert slow_status["waiting_total"] == backlog
        assert slow_status["held_partitions"] == slow.internal_topic_partitions  # one head each
        assert slow_status["next_due_in_s"] > 60

        now_ms = int(time.time() * 1000)
        fresh = [handoff(fast, f"f-{i}", attempt=1 + i % 2, handoff_ms=now_ms) for i in range(40)]
        stale = handoff(fast, "stale", attempt=1, handoff_ms=now_ms, first_failure_ms=1)
        await produce_all(kafka_settings, [*fresh, stale])
        reoffered = await collect(kafka_settings, fast.retry_out_topic, len(fresh))
        dead = await collect(kafka_settings, fast.dlq_topic, 1)
        fast_status = await _status_when(client, base, fast.name, lambda s: s["dlq_size"])
        metrics = (await client.get(f"{base}/metrics")).text

    assert {id_of(r) for r in reoffered} == {f"f-{i}" for i in range(40)}
    for record in reoffered:
        assert 0 <= record.timestamp - due_ms(record, fast) <= SLACK_MS
    assert [id_of(r) for r in dead] == ["stale"]
    assert headers_of(dead[0])["hifi-reason"] == b"expired"
    assert fast_status["dlq_size"] == 1
    assert fast_status["recent_failures"][0]["status"] == "503"
    assert await read_topic(kafka_settings, slow.retry_out_topic) == []
    assert f'hifi_retrier_waiting_events{{dest="{slow.name}",tier="0"}} {backlog}.0' in metrics
    assert f'hifi_retrier_reoffer_delay_seconds_count{{dest="{fast.name}"}} 40.0' in metrics
    assert f'hifi_retrier_expired_total{{dest="{fast.name}"}} 1.0' in metrics
    # what the alert rules compare with (deploy/prometheus/hifi.rules.yml)
    assert (
        f'hifi_retrier_max_retry_age_seconds{{dest="{fast.name}"}} {fast.max_retry_age_s}'
        in metrics
    )
    assert 'hifi_ready{component="retrier"} 1.0' in metrics


async def _ops_url(retrier: Retrier, timeout_s: float = 60.0) -> str:
    """The base URL of the retrier's ops endpoint once it serves and owns its partitions."""
    assert retrier.ops is not None
    async with asyncio.timeout(timeout_s):
        while not retrier.ops.ready:
            await asyncio.sleep(0.1)
    return f"http://127.0.0.1:{retrier.ops.port}"


async def _status_when(
    client: httpx.AsyncClient, base: str, dest: str, ready: Any, timeout_s: float = 60.0
) -> dict[str, Any]:
    """Poll /status until `ready(destination's entry)` is truthy; the entry."""
    async with asyncio.timeout(timeout_s):
        while True:
            answer = await client.get(f"{base}/status")
            if answer.status_code == 200:  # 503 while the retrier starts
                entry: dict[str, Any] = answer.json()["destinations"][dest]
                if ready(entry):
                    return entry
            await asyncio.sleep(0.5)
