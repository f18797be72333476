"""Builders shared by the auditor's integration tests: audited destinations, running auditors, their tables."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import REGISTRY

from auditor.accounts import Accounts
from auditor.archive import Archive
from auditor.daemon import Auditor
from auditor.progress import ProgressClock
from config.catalog import Catalog
from config.destination import Destination
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.tables import report_row
from hifi.kafka import admin as kafka_admin
from hifi.kafka.clients import client_options, kafka_errors, start_client
from hifi.kafka.settings import KafkaSettings
from tests.helpers import write_destination

SETTLE_S = 1.0
# The figures of a table row that two auditors of the same topics must agree on: the counts,
# and the judgement made when the minute settled.
COUNTS = (
    "entered",
    "delivered",
    "dead_lettered",
    "dead_lettered_by_reason",
    "filtered",
    "in_retry",
    "waiting",
    "missing",
    "duplicates",
    "final",
)
JUDGEMENT = (
    "lag_p50_ms",
    "lag_p95_ms",
    "lag_p99_ms",
    "lag_in_p95_ms",
    "process_p95_ms",
    "up",
    "down_reason",
)


def audited_destination(
    catalog_dir: Path, name: str, url: str, topic: str, **keys: Any
) -> Destination:
    """A destination with fast test settings and an [accounting] table settling in a second.

    Keys named in `Accounting` (settle_s, lag_sla_s, ...) go to [accounting]; the rest are
    top-level keys of the destination.
    """
    accounting_keys = {"settle_s", "retention_min", "lag_sla_s", "loss_alarm_ratio", "audit"}
    top = {k: v for k, v in keys.items() if k not in accounting_keys}
    settings: dict[str, Any] = {
        "url": url,
        "source_topics": [topic],
        "local_retry_attempts": 2,
        "local_retry_max_backoff_s": 0.05,
        "commit_interval_s": 0.2,
        "shutdown_timeout_s": 10.0,
        "internal_topic_partitions": 1,
        **top,
    }
    path = write_destination(catalog_dir, name, **settings)
    table = {"settle_s": SETTLE_S, "retention_min": 30, "lag_sla_s": 30.0}
    table.update({k: v for k, v in keys.items() if k in accounting_keys})
    with path.open("a") as out:
        out.write("[accounting]\n")
        out.writelines(f"{key} = {value!r}\n" for key, value in table.items())
    return Catalog(catalog_dir).load(name)


class Daemon(Protocol):
    async def run(self) -> None: ...

    def request_stop(self) -> None: ...


@contextlib.asynccontextmanager
async def running(daemon: Daemon) -> AsyncIterator[asyncio.Task[None]]:
    """Run an auditor (or a connector) as a task; stop it and wait for it on the way out."""
    task = asyncio.create_task(daemon.run())
    try:
        yield task
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, 60)


async def settled(
    auditor: Auditor, dest: str, entered: int, timeout_s: float = 100.0
) -> list[dict[str, Any]]:
    """Wait until every minute holding events is final and `entered` events are counted; the
    rows then, as `/tables` gives them (summed over every share of the destination)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        if auditor.accounts is not None:
            rows = rows_of(auditor, dest)
            total = sum(r["entered"] for r in rows)
            if rows and total >= entered and all(r["final"] for r in rows if r["entered"]):
                return rows
        assert loop.time() < deadline, "the auditor did not settle its minutes in time"
        await asyncio.sleep(0.5)


def now_ms() -> int:
    return int(time.time() * 1000)


def minute_start(epoch_ms: int) -> int:
    return epoch_ms - epoch_ms % MINUTE_MS


def last_minute_final_in(final_in_s: float) -> tuple[int, float]:
    """The minute before this one, and the `settle_s` that makes it final `final_in_s` from now:
    a test's events of that minute are counted final without waiting for this minute's end."""
    now = now_ms()
    minute_ms = minute_start(now) - MINUTE_MS
    return minute_ms, round((now + final_in_s * 1000 - minute_ms - MINUTE_MS) / 1000, 1)


async def sleep_until(epoch_ms: int) -> None:
    """Sleep until the wall clock reaches `epoch_ms` (at once if it has)."""
    await asyncio.sleep(max(0.0, (epoch_ms - now_ms()) / 1000))


def rows_of(auditor: Auditor, dest: str) -> list[dict[str, Any]]:
    """An in-process auditor's rows for `dest`, as `/tables` gives them."""
    assert auditor.accounts is not None, "the auditor has not started"
    view = auditor.accounts.settling.views[dest]
    return [report_row(r) for r in view.rows(from_ms=None, to_ms=None, now_ms=now_ms())]


def by_minute(
    rows: Iterable[Mapping[str, Any]], figures: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """Rows with entries keyed by their ISO minute, each cut to `figures`."""
    keep = list(figures)
    return {row["minute"]: {k: row[k] for k in keep} for row in rows if row["entered"]}


def differences(
    ours: Mapping[str, Mapping[str, Any]], theirs: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, tuple[Any, Any]]]:
    """Per minute, the figures that differ: (ours, theirs); a minute only one side has is `row`."""
    found: dict[str, dict[str, tuple[Any, Any]]] = {}
    for minute in sorted({*ours, *theirs}):
        mine, other = ours.get(minute), theirs.get(minute)
        if mine is None or other is None:
            found[minute] = {"row": (mine, other)}
            continue
        differ = {k: (mine[k], other[k]) for k in mine if mine[k] != other.get(k)}
        if differ:
            found[minute] = differ
    return found


async def tables(base_url: str, dest: str) -> list[dict[str, Any]] | None:
    """A running auditor's `/tables` rows for `dest`; None while it does not answer."""
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            response = await client.get(f"{base_url}/tables", params={"dest": dest})
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    found: dict[str, list[dict[str, Any]]] = response.json()
    return found.get(dest)


async def run_auditor_command(*args: str, timeout_s: float = 60.0) -> tuple[int, str, str]:
    """`python -m auditor ARGS` in a child process, without blocking this event loop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "auditor",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def sample(name: str, labels: Mapping[str, str]) -> float:
    """A sample of this process's Prometheus registry; 0 when the series does not exist yet."""
    return REGISTRY.get_sample_value(name, dict(labels)) or 0.0


async def recreate_topic(settings: KafkaSettings, topic: str, partitions: int = 1) -> None:
    """Delete `topic` and create it again under its name: its offsets start over at 0."""
    admin = AIOKafkaAdminClient(**client_options(settings))  # security settings too
    try:
        await start_client(admin.start, settings, "connect admin client")
        with kafka_errors(settings, f"delete topic {topic}"):
            await admin.delete_topics([topic])
    finally:
        await admin.close()
    for _ in range(50):
        if topic not in await kafka_admin.list_topics(settings):
            break
        await asyncio.sleep(0.2)
    await kafka_admin.ensure_topics(settings, [topic], partitions=partitions)


def group_member(
    dest: Destination,
    archive: Archive,
    *,
    audit_topic: str,
    now_ms: int,
    roll_s: float,
    member: str = "auditor",
    highwater: Callable[[TopicPartition], int | None] = lambda tp: None,
) -> Accounts:
    """A member named `member` of auditor group "g" (partitions 0 and 1 of `dest`'s first
    source topic), at a fixed clock, its high watermarks `highwater`'s (unknown by default)."""
    return Accounts(
        {dest.name: dest},
        archive,
        audit_topic=audit_topic,
        clock=ProgressClock(highwater, lambda: now_ms),
        roll_s=roll_s,
        group_id="g",
        partitions={dest.source_topics[0]: [0, 1]},
        member=member,
        now_ms=lambda: now_ms,
    )
