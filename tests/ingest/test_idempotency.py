"""Idempotency-Key: a repeat gets the first answer, 409 in progress, 422 another body; Redis down: served."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import orjson
import pytest
import redis

from devstack.redis import RedisServer
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache.redis_hash import RedisSettings
from ingest.service import IngestService
from tests.ingest.support import auth, make_topic, serving, streams_dir, url

pytestmark = [pytest.mark.integration]

HEADERS = {"content-type": "application/json", **auth()}


@pytest.fixture(scope="module")
async def service(
    kafka_settings: KafkaSettings,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[IngestService]:
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path_factory.mktemp("idem"), topic)
    settings = replace(
        RedisSettings(redis_server.url), connect_timeout_s=0.5, command_timeout_s=0.5
    )
    async with serving(directory, kafka_settings, redis=settings) as running:
        yield running


async def _post(service: IngestService, body: bytes, key: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            url(service), content=body, headers={**HEADERS, "idempotency-key": key}
        )


async def test_a_repeat_gets_the_first_answer_and_produces_nothing(
    service: IngestService, kafka_settings: KafkaSettings
) -> None:
    """The same key and body again: the first status and body, byte for byte; one record in Kafka."""
    key, event_id = uuid.uuid4().hex, uuid.uuid4().hex
    body = orjson.dumps([{"id": event_id}, {"no": "id"}])
    first = await _post(service, body, key)
    assert first.status_code == 200
    assert first.headers["idempotency-status"] == "new"
    again = await _post(service, body, key)
    assert again.status_code == 200
    assert again.headers["idempotency-status"] == "replayed"
    assert again.content == first.content
    generated = first.json()["results"][1]["id"]
    records = await read_topic(kafka_settings, service.streams["clicks"].topic)
    keys = [record.key for record in records]
    assert keys.count(event_id.encode()) == 1
    assert keys.count(generated.encode()) == 1


async def test_another_body_under_the_same_key_is_422(service: IngestService) -> None:
    """A key is for one request: reused with another body it is refused, nothing produced."""
    key = uuid.uuid4().hex
    assert (await _post(service, b'{"id": "k-1"}', key)).status_code == 200
    response = await _post(service, b'{"id": "k-2"}', key)
    assert response.status_code == 422
    assert "another body" in response.json()["error"]


async def test_a_key_in_progress_is_409(service: IngestService, redis_server: RedisServer) -> None:
    """While the first request with a key is pending, a repeat is 409 with Retry-After."""
    key, body = uuid.uuid4().hex, b'{"id": "p-1"}'
    pending = orjson.dumps({"body_sha256": hashlib.sha256(body).hexdigest()})
    client = redis.Redis.from_url(redis_server.url)
    client.set(f"hifi:ingest:idempotency:clicks:{key}", pending, px=60_000)
    client.close()
    response = await _post(service, body, key)
    assert response.status_code == 409
    assert response.headers["retry-after"] == "1"


async def test_a_bad_key_is_400(service: IngestService) -> None:
    """A key with spaces or over 255 characters is refused before anything is produced."""
    assert (await _post(service, b"{}", "has space")).status_code == 400
    assert (await _post(service, b"{}", "k" * 256)).status_code == 400


async def test_redis_down_serves_the_request_and_says_so(
    service: IngestService, redis_server: RedisServer
) -> None:
    """Redis stopped: the key is ignored, the events produced, Idempotency-Status: unavailable."""
    redis_server.stop()
    try:
        key = uuid.uuid4().hex
        for _ in range(2):
            response = await _post(service, b'{"id": "r-1"}', key)
            assert response.status_code == 200
            assert response.headers["idempotency-status"] == "unavailable"
    finally:
        redis_server.start()
    response = await _post(service, b'{"id": "r-2"}', uuid.uuid4().hex)
    assert response.headers["idempotency-status"] == "new"
