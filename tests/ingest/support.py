"""An ingest service run in the test's process against the test broker, and what the tests send it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from config.streams import hash_token, load_streams
from hifi.kafka import admin
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache.redis_hash import RedisSettings
from ingest.service import IngestService, ServiceSettings

TOKEN = "token-of-the-clicks-stream"
OTHER_TOKEN = "token-of-the-other-stream"


def write_stream(directory: Path, name: str, **keys: Any) -> Path:
    """`NAME.toml` with the given keys (strings quoted, lists of strings as arrays)."""

    def toml(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return f'"{value}"'
        if isinstance(value, list):
            return "[" + ", ".join(toml(item) for item in value) + "]"
        return repr(value)

    path = directory / f"{name}.toml"
    path.write_text("".join(f"{key} = {toml(value)}\n" for key, value in keys.items()))
    return path


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def streams_dir(root: Path, topic: str, **limits: Any) -> Path:
    """A streams directory: `clicks` (the test token) and `other` (another token), both on `topic`."""
    directory = root / "streams"
    directory.mkdir(exist_ok=True)
    write_stream(directory, "clicks", topic=topic, tokens_sha256=[hash_token(TOKEN)], **limits)
    write_stream(directory, "other", topic=topic, tokens_sha256=[hash_token(OTHER_TOKEN)])
    return directory


async def make_topic(settings: KafkaSettings, partitions: int = 2) -> str:
    topic = "ingest-" + uuid.uuid4().hex[:10]
    await admin.ensure_topics(settings, [topic], partitions=partitions)
    return topic


@contextlib.asynccontextmanager
async def serving(
    directory: Path,
    kafka_settings: KafkaSettings,
    *,
    redis: RedisSettings | None = None,
    audit_topic: str | None = None,
    **settings: Any,
) -> AsyncIterator[IngestService]:
    """The service on a free loopback port until the block exits, then drained; its accepted
    facts go to `audit_topic` (default: `HIFI_AUDIT_TOPIC`)."""
    options: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "metrics_port": 0}
    options.update(settings)
    service = IngestService(
        load_streams(directory),
        kafka_settings,
        ServiceSettings(**options),
        redis=redis,
        audit_topic=audit_topic,
    )
    running = asyncio.create_task(service.run())
    started = asyncio.create_task(service.started.wait())
    await asyncio.wait([running, started], return_when=asyncio.FIRST_COMPLETED)
    if running.done():
        started.cancel()
        running.result()  # its failure, surfaced
    try:
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(running, 60)


def url(service: IngestService, stream: str = "clicks", suffix: str = "") -> str:
    return f"http://127.0.0.1:{service.port}/v1/events/{stream}{suffix}"
