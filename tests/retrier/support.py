"""Builders and waits for the retrier tests: hand-off records, reading a topic until enough arrived."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
import pytest

from config.destination import Destination
from hifi.headers import header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings

SLACK_MS = 3000  # "within 1 s after due", plus room for a loaded two-core machine
RETRIER = [sys.executable, "-m", "retrier"]


def handoff(
    dest: Destination,
    event_id: str,
    *,
    attempt: int,
    handoff_ms: int,
    first_failure_ms: int | None = None,
) -> tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """A record as the connector writes it to NAME.retry_in after `attempt` failures."""
    headers = [
        ("trace", f"tr-{event_id}".encode()),
        ("hifi-dest", dest.name.encode()),
        ("hifi-attempt", str(attempt).encode()),
        ("hifi-first-failure-ms", str(first_failure_ms or handoff_ms).encode()),
        ("hifi-handoff-ms", str(handoff_ms).encode()),
        ("hifi-status", b"503"),
        ("hifi-error", b"HTTP 503 Service Unavailable"),
        ("hifi-origin", f"src/0/{event_id}".encode()),
        ("hifi-history", orjson.dumps([{"at_ms": handoff_ms, "attempt": attempt}])),
        ("hifi-event-time-ms", str(first_failure_ms or handoff_ms).encode()),
        ("hifi-event-id", event_id.encode()),
    ]
    value = orjson.dumps({"id": event_id, "payload": "x" * 40})
    return dest.retry_in_topic, event_id.encode(), value, headers


def dead_letter(
    dest: Destination, event_id: str, reason: str, *, dead_ms: int
) -> tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """A record of NAME.dlq as the retrier writes it after two failures, with `reason`."""
    _, key, value, headers = handoff(dest, event_id, attempt=2, handoff_ms=dead_ms)
    return dest.dlq_topic, key, value, [*headers, ("hifi-reason", reason.encode())]


async def create_topics(settings: KafkaSettings, *dests: Destination) -> None:
    """The topics the connector and retrier would create, so tests can read them from the start."""
    for dest in dests:
        await kafka_admin.ensure_topics(
            settings,
            [dest.retry_in_topic, dest.retry_out_topic, dest.dlq_topic],
            partitions=dest.internal_topic_partitions,
        )


async def produce_all(
    settings: KafkaSettings,
    records: Iterable[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]],
) -> None:
    async with open_producer(settings) as producer:
        await producer.send_all(list(records))


async def collect(
    settings: KafkaSettings, topic: str, count: int, timeout_s: float = 60.0
) -> list[Any]:
    """Read `topic` from the beginning until at least `count` records arrived; all read so far.

    Waits on the broker's long polls, not on sleeps; returns what it has at the deadline.
    """
    return await read_topic(settings, topic, at_least=count, timeout_s=timeout_s)


def id_of(record: Any) -> str:
    return str(orjson.loads(record.value)["id"])


def headers_of(record: Any) -> dict[str, bytes]:
    return header_map(record.headers)


def due_ms(record: Any, dest: Destination) -> int:
    """When a record on NAME.retry_out was due: its hand-off plus the delay of its attempt's tier."""
    headers = headers_of(record)
    tier = int(headers["hifi-attempt"]) - 1
    return int(headers["hifi-handoff-ms"]) + round(dest.retry_tiers_s[tier] * 1000)


async def run_retrier_command(*args: str, bootstrap: str) -> tuple[int, str, str]:
    """`python -m retrier ARGS` without blocking the event loop; exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        *RETRIER,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": bootstrap},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


CHROMIUM = shutil.which("chromium")


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    """Debian's chromium driven by Playwright (never a browser download of the tool's own); the
    test is skipped, saying why, where it is not installed."""
    if CHROMIUM is None:
        pytest.skip("no chromium: `make test` installs Debian's package (make browser)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()
