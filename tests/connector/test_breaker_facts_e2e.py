"""A connector's breaker, opened by 401s and closed by a recovery, in a running auditor's /status."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from auditor.daemon import Auditor
from connector.daemon import Connector
from devstack.destination import Reply, TestDestination
from devstack.kafka_tools import produce_events
from hifi.kafka.settings import KafkaSettings
from tests.auditor.support import audited_destination, running
from tests.helpers import events

pytestmark = [pytest.mark.integration]


async def _breaker(client: httpx.AsyncClient, auditor: Auditor, dest: str) -> dict[str, Any]:
    assert auditor.ops is not None
    found = await client.get(f"http://127.0.0.1:{auditor.ops.port}/status")
    if found.status_code != 200:  # 503 while it starts: /status is not mounted yet
        return {}
    shown: dict[str, Any] = found.json()["dests"][dest]["health"]["breaker"]
    return shown


async def _until(
    client: httpx.AsyncClient, auditor: Auditor, dest: str, state: str
) -> dict[str, Any]:
    """The auditor's breaker of `dest` once it is in `state` (polled, within 30 s)."""
    shown: dict[str, Any] = {}
    for _ in range(300):
        try:
            shown = await _breaker(client, auditor, dest)
        except httpx.TransportError:  # its ops server is not listening yet
            shown = {}
        if shown.get("state") == state:
            return shown
        await asyncio.sleep(0.1)
    raise AssertionError(f"the auditor's breaker of {dest} never became {state}: {shown}")


async def test_a_401_opens_the_breaker_in_the_auditor_and_a_recovery_closes_it(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """A destination answering 401 opens the connector's breaker: the running auditor's
    /status shows it open since then, on one replica, with the 401; once the destination
    answers 2xx again the probe closes it and the auditor shows it closed."""
    audit_topic = f"{unique}.audit"
    await produce_events(kafka_settings, unique, events(200, prefix=unique))
    dest = audited_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        max_batch_records=20,
        breaker_failures=2,
        breaker_max_open_s=1.0,
    )
    destination.set_faults(1.0, [Reply(401)])
    connector = Connector(dest, kafka_settings, audit_topic=audit_topic)
    auditor = Auditor(
        [dest],
        kafka_settings,
        archive_dir=tmp_path / "archive",
        roll_s=0.5,
        topic=audit_topic,
        group_id=f"{unique}.auditor",
        metrics_port=0,
    )
    async with (
        running(connector),
        running(auditor),
        httpx.AsyncClient(timeout=10) as client,
    ):
        shown = await _until(client, auditor, unique, "open")
        assert shown["replicas"] == 1
        assert shown["since_ms"] is not None
        assert "401" in (shown["last_error"] or "")
        destination.reset_script()
        shown = await _until(client, auditor, unique, "closed")
    assert (shown["since_ms"], shown["last_error"], shown["replicas"]) == (None, None, 1)
