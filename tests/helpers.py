"""Small builders shared by the tests: catalog files, events, connector runs."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx
import orjson
from aiokafka import ConsumerRecord, TopicPartition

from config.catalog import Catalog
from config.destination import Destination
from devstack.processes import start_daemon
from hifi.audit import decode_facts
from hifi.envelope import Event, parse_records
from hifi.errors import BrokerUnavailable
from hifi.kafka.clients import Headers
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from hifi.ops_http import OpsServer

__all__ = [
    "TAKEN_MS",
    "FakeKafka",
    "Named",
    "Sleeps",
    "all_headers",
    "events",
    "leaks",
    "make_destination",
    "make_event",
    "read_facts",
    "running",
    "start_daemon",
    "until",
    "wait_exit",
    "write_destination",
]


TAKEN_MS = 1_700_000_000_500  # when `make_event`'s events were taken in


def write_destination(catalog_dir: Path, name: str, **keys: Any) -> Path:
    """Write `name.toml` with the given top-level keys; a dict (`headers`, `accounting`) is a table."""
    tables = {key: keys.pop(key) for key, value in list(keys.items()) if isinstance(value, dict)}
    lines = [f"{key} = {_toml(value)}" for key, value in keys.items()]
    for table, entries in tables.items():
        if entries:
            lines.append(f"[{table}]")
            lines.extend(f"{key} = {_toml(value)}" for key, value in entries.items())
    path = catalog_dir / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def make_destination(
    catalog_dir: Path, name: str, url: str, topic: str, **keys: Any
) -> Destination:
    """A loaded destination with fast test-friendly retry settings unless overridden."""
    settings: dict[str, Any] = {
        "url": url,
        "source_topics": [topic],
        "local_retry_attempts": 3,
        "local_retry_max_backoff_s": 0.05,
        "commit_interval_s": 0.2,
        "shutdown_timeout_s": 10.0,
        "internal_topic_partitions": 2,
    }
    if "lookups" in keys:  # tests serve their tenants on loopback
        settings["allow_private_destinations"] = True
    settings.update(keys)
    write_destination(catalog_dir, name, **settings)
    return Catalog(catalog_dir).load(name)


def events(count: int, prefix: str = "e", start: int = 0) -> list[dict[str, Any]]:
    now_ms = int(time.time() * 1000)
    return [
        {"id": f"{prefix}-{i}", "event_time": now_ms, "seq": i, "payload": "x" * 50}
        for i in range(start, start + count)
    ]


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


async def wait_exit(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    """Wait for a child process without blocking the event loop."""
    return await asyncio.wait_for(asyncio.to_thread(process.wait), timeout_s)


async def until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    """Poll `condition` (for state only visible outside this process, like a log file)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(interval_s)
    return True


def until_blocking(
    condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.05
) -> bool:
    """`until` for a test without an event loop (a child process polled over blocking HTTP)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True


async def ops_status(ops: OpsServer | None) -> dict[str, Any]:
    """The `/status` document of a daemon running in this process (its ops server)."""
    assert ops is not None, "the daemon serves no ops port"
    async with httpx.AsyncClient(timeout=10) as client:
        found = await client.get(f"http://127.0.0.1:{ops.port}/status")
    document: dict[str, Any] = found.json()
    return document


def make_event(
    i: int,
    *,
    topic: str = "src",
    size: int = 0,
    user_headers: list[tuple[str, bytes]] | None = None,
) -> Event:
    """An `Event` as the connector builds it from record `i` of partition 0 of `topic`."""
    value = orjson.dumps({"id": f"e{i}", "p": "x" * size} if size else {"id": f"e{i}"})
    record = ConsumerRecord(
        topic, 0, i, 1, 0, f"e{i}".encode(), value, None, 3, len(value), user_headers or ()
    )
    parsed = parse_records(
        TopicPartition(topic, 0),
        [record],
        id_field="id",
        event_time_field="t",
        max_bytes=1 << 20,
        taken_ms=TAKEN_MS,
    )
    return parsed.events[0]


class FakeKafka:
    """Records what would have been written to Kafka; can be told to fail like a dead broker."""

    def __init__(self, fail: bool = False) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, Headers]] = []
        self.fail = fail

    async def send_all(
        self, records: Sequence[tuple[str, bytes | None, bytes | None, Headers]]
    ) -> None:
        if self.fail:
            raise BrokerUnavailable("kafka produce failed: test")
        self.records.extend(records)

    async def append_all(
        self, records: Sequence[tuple[str, bytes | None, bytes | None, Headers]]
    ) -> Awaitable[None]:
        """Queued and acknowledged at once (a dead broker fails the call)."""
        await self.send_all(records)
        return _acknowledged()

    def ids(self, topic: str) -> list[str]:
        return [orjson.loads(v or b"{}")["id"] for t, _, v, _ in self.records if t == topic]


async def _acknowledged() -> None:
    """A `FakeKafka` write's acknowledgement: already there."""


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@dataclass(frozen=True, slots=True)
class Named:
    """One event as an audit fact names it, with what the fact says of it."""

    outcome: str
    reason: str | None
    status: int | None
    node: str
    dest: str
    origin: tuple[str, int, int]
    id: str | None
    event_time_ms: int
    taken_ms: int


async def read_facts(settings: KafkaSettings, topic: str) -> list[Named]:
    """Every event named by the facts of an audit topic, fact by fact, in the topic's order."""
    named: list[Named] = []
    for record in await read_topic(settings, topic):
        for fact, part in (
            (one, part) for one in decode_facts(record.value, record.headers) for part in one.slices
        ):
            for offset, event_id, event_time_ms, taken_ms in zip(
                part.offsets, part.ids, part.event_times_ms, part.taken_ms, strict=True
            ):
                named.append(
                    Named(
                        fact.outcome,
                        fact.reason,
                        fact.status,
                        fact.node,
                        fact.dest,
                        (part.topic, part.partition, offset),
                        event_id,
                        event_time_ms,
                        taken_ms,
                    )
                )
    return named


class Daemon(Protocol):
    """A connector or a retrier run in this process."""

    async def run(self) -> None: ...

    def request_stop(self) -> None: ...


@contextlib.asynccontextmanager
async def running(*daemons: Daemon) -> AsyncIterator[None]:
    """Run daemons for the block, then stop them (drain, commit) and surface any failure."""
    tasks = [asyncio.create_task(daemon.run()) for daemon in daemons]
    try:
        yield
    finally:
        for daemon in daemons:
            daemon.request_stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)


SECRET_PIECE = 8  # hifi masks every run of this many characters of a secret


def all_headers(record: Any) -> bytes:
    """A Kafka record's headers as `name: value` lines, to search for secrets."""
    return b"\n".join(name.encode() + b": " + (value or b"") for name, value in record.headers)


def leaks(secret: str, *texts: str | bytes) -> list[str]:
    """Pieces of `secret` of 8 characters in `texts`: plain, percent-encoded, or JSON-escaped."""
    forms = {
        secret,
        quote(secret, safe=""),
        quote(secret, safe="").lower(),
        secret.replace("/", "\\/"),
        secret.replace("/", "\\\\\\/"),
    }
    found: list[str] = []
    for raw in texts:
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        for form in forms:
            found.extend(
                form[i : i + SECRET_PIECE]
                for i in range(len(form) - SECRET_PIECE + 1)
                if form[i : i + SECRET_PIECE] in text
            )
    return found
