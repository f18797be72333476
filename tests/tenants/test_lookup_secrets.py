"""Secrets of tenant entries never get into what hifi writes: the connector's log, `/status`, hand-offs, dead letters.

The connector runs as a process (DEBUG, JSON lines) against a destination that echoes the
tenant's API key in its error replies, with a second entry in Redis that is not JSON and holds
another secret: that one is never accepted, so it can only stay out of the log by not being
quoted.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import redis

from devstack.destination import Echo, Reply, TestDestination
from devstack.kafka_tools import produce_events
from devstack.ports import free_port
from devstack.processes import start_daemon
from devstack.redis import RedisServer
from hifi.headers import header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from tests.helpers import all_headers, leaks, wait_exit
from tests.tenants.support import TENANT_FIELD, entry, write_tenant_destination

pytestmark = [pytest.mark.integration]


def _token() -> str:
    raw = secrets.token_urlsafe(30)
    return f"{raw[:13]}/{raw[14:27]}+{raw[28:40]}"


async def _status_once(port: int, timeout_s: float = 90) -> str:
    """The connector's /status once it counts a dead letter and a hand-off; the body."""
    async with httpx.AsyncClient(timeout=5) as client, asyncio.timeout(timeout_s):
        while True:
            try:
                response = await client.get(f"http://127.0.0.1:{port}/status")
                page = response.json()
                if page["totals"]["dead_lettered"] >= 1 and page["totals"]["handed_off"] >= 1:
                    return response.text
            except (httpx.TransportError, ValueError, KeyError):
                pass
            await asyncio.sleep(0.2)


async def test_entry_secrets_are_masked_everywhere(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    redis_server: RedisServer,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rejected request whose reply echoes the tenant's key is dead-lettered and a 503 echoing
    it is handed off, both with the key masked; the log at DEBUG, /status and every header of
    the hand-off and the dead letter hold no 8 characters of either secret."""
    key, other = _token(), _token()
    template = destination.url.replace("/v1/events", "/v1/{tenant}/events")
    write_tenant_destination(catalog_dir, unique, template, unique)
    client = redis.Redis.from_url(redis_server.url)
    client.hset(
        f"hifi:tenants:{unique}",
        mapping={
            "acme": entry(values={"api_key": key}),
            "broken": b'{"values": {"api_key": "' + other.encode() + b'"',
        },
    )
    client.close()
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    destination.echo(Echo(text=key))
    destination.reject_ids({"rej-0"})
    destination.script(Reply(503), Reply(503))
    await produce_events(
        kafka_settings,
        unique,
        [
            {"id": "rej-0", TENANT_FIELD: "acme"},
            {"id": "busy-0", TENANT_FIELD: "acme"},
            {"id": "br-0", TENANT_FIELD: "broken"},
        ],
    )
    monkeypatch.setenv("HIFI_REDIS_URL", redis_server.url)
    monkeypatch.setenv("HIFI_STATE_DIR", str(tmp_path / "state"))
    port = free_port()
    log_path = tmp_path / "connector.log"
    args = ["--dest", unique, "--catalog", str(catalog_dir), "--metrics-port", str(port)]
    process = start_daemon(
        "connector",
        [*args, "--log-level", "DEBUG"],
        bootstrap=kafka_settings.bootstrap,
        log_path=log_path,
    )
    processes.append(process)
    status = await _status_once(port)
    process.send_signal(signal.SIGTERM)
    assert await wait_exit(process, 60) == 0, log_path.read_text()[-3000:]
    log = log_path.read_text()

    (letter,) = await read_topic(kafka_settings, f"{unique}.dlq", at_least=1)
    handed = await read_topic(kafka_settings, f"{unique}.retry_in", at_least=2)
    headers = [all_headers(record) for record in [letter, *handed]]
    assert destination.requests[0].headers["x-api-key"] == key
    assert leaks(key, log, status, *headers) == []
    assert leaks(other, log, status, *headers) == []
    assert header_map(letter.headers)["hifi-reason"] == b"http_4xx"
    assert b"***" in header_map(letter.headers)["hifi-error"]
    assert {header_map(r.headers).get("hifi-cause") for r in handed} == {None, b"unknown_tenant"}
    assert "lookup_entry_refused" in log
    assert "tenant 'broken': the entry is not JSON" in log
    assert '"lookups"' in status
