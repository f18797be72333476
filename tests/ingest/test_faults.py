"""Back-pressure and stopping: a stopped broker is 503 + Retry-After, a full process sheds, a drain ends streams."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devstack.broker import LocalBroker
from hifi.kafka.settings import KafkaSettings
from ingest.service import IngestService
from tests.ingest.support import TOKEN, auth, make_topic, serving, streams_dir, url

pytestmark = [pytest.mark.integration]

HEADERS = {"content-type": "application/json", **auth()}


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker of this test's own, which it may stop and start again on the same port."""
    broker = LocalBroker(log_path=tmp_path / "tansu.log").start()
    try:
        yield broker
    finally:
        broker.stop()


async def test_a_stopped_broker_is_503_with_retry_after_then_recovers(
    own_broker: LocalBroker, tmp_path: Path
) -> None:
    """Kafka gone: 503 and Retry-After within the ack timeout, never a 2xx; back: 200 again."""
    settings = KafkaSettings(bootstrap=own_broker.bootstrap)
    topic = await make_topic(settings)
    directory = streams_dir(tmp_path, topic)
    async with (
        serving(directory, settings, ack_timeout_s=2.0) as service,
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert (
            await client.post(url(service), content=b'{"id": "a"}', headers=HEADERS)
        ).status_code == 200
        own_broker.stop()
        started = time.monotonic()
        response = await client.post(
            url(service), content=b'[{"id": "b"}, {"id": "c"}]', headers=HEADERS
        )
        assert response.status_code == 503
        assert response.headers["retry-after"] == "2"
        assert "resend the whole request" in response.json()["error"]
        assert time.monotonic() - started < 10
        restarted = LocalBroker(
            port=int(own_broker.bootstrap.rsplit(":", 1)[1]), log_path=tmp_path / "tansu2.log"
        ).start()
        try:
            await make_topic_named(settings, topic)
            deadline = time.monotonic() + 60
            status = 0
            while status != 200 and time.monotonic() < deadline:
                response = await client.post(url(service), content=b'{"id": "d"}', headers=HEADERS)
                status = response.status_code
                assert status in (200, 503)
            assert status == 200
        finally:
            restarted.stop()


async def make_topic_named(settings: KafkaSettings, topic: str) -> None:
    from hifi.kafka import admin

    await admin.ensure_topics(settings, [topic], partitions=2)


async def _open_stream(service: IngestService) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A streamed request whose first event is answered; the request stays open."""
    reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
    writer.write(
        (
            "POST /v1/events/clicks:stream HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/x-ndjson\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
        + chunk(b'{"id": "hold-0"}\n')
    )
    await writer.drain()
    await read_until(reader, b"hold-0")
    return reader, writer


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked request body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def read_until(reader: asyncio.StreamReader, wanted: bytes) -> bytes:
    """What the connection sends until `wanted` is in it; fails if it closes first."""
    seen = b""
    while wanted not in seen:
        more = await asyncio.wait_for(reader.read(4096), 30)
        assert more, f"connection closed before {wanted!r}: {seen!r}"
        seen += more
    return seen


async def test_beyond_max_in_flight_a_request_is_shed_with_503(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """With one request in flight allowed and a stream holding it, a batch is 503 Retry-After: 1."""
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path, topic)
    async with (
        serving(directory, kafka_settings, max_in_flight=1) as service,
        httpx.AsyncClient(timeout=30) as client,
    ):
        reader, writer = await _open_stream(service)
        response = await client.post(url(service), content=b'{"id": "x"}', headers=HEADERS)
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert "in flight" in response.json()["error"]
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await read_until(reader, b'"end":true')
        writer.close()
        response = await client.post(url(service), content=b'{"id": "y"}', headers=HEADERS)
        assert response.status_code == 200


async def test_a_drain_ends_open_streams_and_the_service(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """request_stop: an open stream gets its last line (draining), new connections are refused."""
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path, topic)
    async with serving(directory, kafka_settings, drain_timeout_s=20) as service:
        reader, writer = await _open_stream(service)
        service.request_stop()
        seen = await read_until(reader, b'"end":true')
        assert b'"draining":true' in seen
        assert b'"accepted":1' in seen
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await _connect_until_refused(service.port)


async def _connect_until_refused(port: int) -> None:
    """Connect until the port refuses (the listening socket closes at once on a drain)."""
    for _ in range(50):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        await asyncio.sleep(0.1)


async def test_a_stream_whose_broker_stops_ends_with_an_error_line(
    own_broker: LocalBroker, tmp_path: Path
) -> None:
    """Kafka gone mid-stream: no accepted line for what was not acknowledged; the last line says
    to resend from there, with retry_after_s."""
    settings = KafkaSettings(bootstrap=own_broker.bootstrap)
    topic = await make_topic(settings)
    directory = streams_dir(tmp_path, topic)
    async with serving(directory, settings, ack_timeout_s=2.0) as service:
        reader, writer = await _open_stream(service)
        own_broker.stop()
        writer.write(chunk(b'{"id": "lost-1"}\n{"id": "lost-2"}\n'))
        await writer.drain()
        seen = await read_until(reader, b'"end":true')
        writer.close()
    assert b"lost-1" not in seen
    assert b'"retry_after_s":2' in seen
    assert b'"accepted":1' in seen


async def test_a_body_too_slow_to_arrive_is_408(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A sender that stops half-way through its body is answered 408 and frees its place."""
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path, topic)
    async with serving(directory, kafka_settings, body_timeout_s=0.5) as service:
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        writer.write(
            (
                "POST /v1/events/clicks HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                'Content-Length: 100\r\n\r\n{"id": '
            ).encode()
        )
        await writer.drain()
        seen = await read_until(reader, b"the body did not arrive")
        writer.close()
        assert seen.startswith(b"HTTP/1.1 408")


async def test_a_silent_stream_is_ended_as_idle(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A stream that sends nothing for body_timeout_s gets its last line (idle) and frees its place."""
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path, topic)
    async with serving(directory, kafka_settings, body_timeout_s=0.5) as service:
        reader, writer = await _open_stream(service)
        seen = await read_until(reader, b'"end":true')
        writer.close()
    assert b'"idle":true' in seen
    assert b'"accepted":1' in seen
