"""Builders for the rewind and backfill tests: records stamped far from write time, missing-event files, the command."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from aiokafka import TopicPartition

from hifi.kafka import admin as kafka_admin
from hifi.kafka.clients import Record
from hifi.kafka.consuming import open_consumer
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings

CONNECTOR = [sys.executable, "-m", "connector"]
BASE_MS = 1_600_000_000_000  # 2020-09-13T12:26:40Z: record timestamps years before write time
STEP_MS = 1000  # record i of a partition is stamped BASE_MS + i * STEP_MS
MISSING_SCHEMA = pa.schema(
    [
        ("dest", pa.string()),
        ("minute_ms", pa.int64()),
        ("event_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("event_time_ms", pa.int64()),
    ]
)


def event_id(partition: int, index: int) -> str:
    return f"p{partition}-{index}"


def at(index: float) -> str:
    """ISO 8601 of the timestamp of record `index` (fractions fall between two records)."""
    moment = datetime.fromtimestamp((BASE_MS + index * STEP_MS) / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def seed(settings: KafkaSettings, topic: str, *, partitions: int, per_partition: int) -> None:
    """`per_partition` events on each partition of a new topic; record i carries the explicit
    timestamp BASE_MS + i s (its event time too) and a user header."""
    await kafka_admin.ensure_topics(settings, [topic], partitions=partitions)
    async with open_producer(settings) as producer:
        for partition in range(partitions):
            records: list[Record] = [
                (
                    topic,
                    f"key-{partition}-{i}".encode(),
                    orjson.dumps(
                        {"id": event_id(partition, i), "event_time": BASE_MS + i * STEP_MS}
                    ),
                    [("trace", f"tr-{partition}-{i}".encode())],
                )
                for i in range(per_partition)
            ]
            stamps = [BASE_MS + i * STEP_MS for i in range(per_partition)]
            await producer.send_all(records, partition=partition, timestamps_ms=stamps)


async def commit_offsets(
    settings: KafkaSettings, group_id: str, offsets: dict[TopicPartition, int]
) -> None:
    """Commit offsets for a group that has no members, as a stopped connector left them."""
    async with open_consumer(settings, group_id=group_id) as member:
        member.assign(offsets)
        await member.commit(offsets)


async def run_command(
    *args: str, bootstrap: str, env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> tuple[int, str, str]:
    """`python -m connector ARGS` without blocking the event loop; exit code, stdout, stderr."""
    process = await start_command(*args, bootstrap=bootstrap, env=env)
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def start_command(
    *args: str, bootstrap: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """`python -m connector ARGS` started, its output piped."""
    return await asyncio.create_subprocess_exec(
        *CONNECTOR,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": bootstrap, **(env or {})},
    )


def write_missing(
    path: Path, dest: str, origins: Iterable[tuple[str, int, int]], *, dest_column: bool = True
) -> None:
    """A missing-events Parquet file listing `origins` for `dest`, as the reconciliation writes
    it; without `dest_column` the destination is only in the path (dest=NAME/)."""
    rows = [
        {
            "dest": dest,
            "minute_ms": (BASE_MS + offset * STEP_MS) // 60_000 * 60_000,
            "event_id": event_id(partition, offset),
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "event_time_ms": BASE_MS + offset * STEP_MS,
        }
        for topic, partition, offset in origins
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=MISSING_SCHEMA)
    pq.write_table(table if dest_column else table.drop_columns(["dest"]), path)


def origins_of(records: Sequence[Any]) -> list[tuple[str, int, int]]:
    """The hifi-origin of each record, as (topic, partition, offset)."""
    found = []
    for record in records:
        origin = dict(record.headers)["hifi-origin"].decode()
        topic, partition, offset = origin.rsplit("/", 2)
        found.append((topic, int(partition), int(offset)))
    return found
