"""What `make bench-ingest` measures against: the ingest service as its own process, with a stream
of its own, and the ceiling, a bare producer (acks=all) writing the same events to the same broker."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path

import orjson

from devstack.ports import free_port
from devstack.processes import start_daemon
from devstack.readiness import until_ready
from hifi.kafka.clients import Record
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings

STREAM = "bench"
_READY_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_CEILING_CHUNK = 1000  # events per append_all call of the ceiling
_CEILING_IN_FLIGHT = 32  # chunks awaiting their acknowledgement at once


@dataclass(frozen=True)
class Service:
    """A running ingest process."""

    pid: int
    url: str  # POST here
    token: str
    log_path: Path


def hash_token(token: str) -> str:
    """The `tokens_sha256` line for `token`, from `ingest hash-token` as an operator makes it."""
    done = subprocess.run(
        [sys.executable, "-m", "ingest", "hash-token"],
        input=token,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def write_stream(directory: Path, topic: str, token_sha256: str) -> Path:
    """`directory/bench.toml`: the stream of config/streams.py's format, its defaults kept."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{STREAM}.toml"
    path.write_text(
        f'# the bench stream: POST /v1/events/{STREAM}\ntopic = "{topic}"\n'
        f'tokens_sha256 = ["{token_sha256}"]\nid_field = "id"\nevent_time_field = "event_time"\n'
    )
    return path


@contextlib.asynccontextmanager
async def serving(work: Path, settings: KafkaSettings, topic: str) -> AsyncIterator[Service]:
    """`python -m ingest` on free loopback ports, ready (`/readyz`), stopped with SIGTERM on exit."""
    work.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(32)
    streams = work / "streams"
    write_stream(streams, topic, hash_token(token))
    port, metrics_port = free_port(), free_port()
    log_path = work / "ingest.log"
    process = start_daemon(
        "ingest",
        [
            "--streams",
            str(streams),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--metrics-port",
            str(metrics_port),
        ],
        log_path=log_path,
        kafka=settings,
    )
    try:
        if not await until_ready([metrics_port], _READY_TIMEOUT_S):
            raise RuntimeError(f"ingest not ready in {_READY_TIMEOUT_S:g} s: see {log_path}")
        url = f"http://127.0.0.1:{port}/v1/events/{STREAM}"
        yield Service(process.pid, url, token, log_path)
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, _STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)


def event_bytes(label: str, index: int, pad_bytes: int) -> bytes:
    """One event as the load generator writes it (bench/ingest_wrk.py's script)."""
    return orjson.dumps(
        {
            "id": f"{label}-{index}",
            "event_time": int(time.time() * 1000),
            "payload": "x" * pad_bytes,
        }
    )


async def producer_ceiling(
    settings: KafkaSettings, topic: str, *, events: int, pad_bytes: int, label: str
) -> float:
    """Events/s of hifi's producer (aiokafka, acks=all) writing `events` events of the load
    generator's size to `topic`, keyed by id, as fast as they are acknowledged."""
    values = [event_bytes(label, i, pad_bytes) for i in range(events)]
    records: list[Record] = [(topic, f"{label}-{i}".encode(), v, []) for i, v in enumerate(values)]
    async with open_producer(settings) as producer:
        await producer.send_all(records[:10])  # metadata and connections before the clock starts
        pending: list[Awaitable[object]] = []
        started = time.monotonic()
        for start in range(10, events, _CEILING_CHUNK):
            pending.append(await producer.append_all(records[start : start + _CEILING_CHUNK]))
            if len(pending) >= _CEILING_IN_FLIGHT:
                await pending.pop(0)
        for acknowledged in pending:
            await acknowledged
        elapsed_s = time.monotonic() - started
    return (events - 10) / elapsed_s if elapsed_s > 0 else 0.0
