"""Single-event requests, their headers and signatures, checked from the receiver's side: the
signatures by the `standardwebhooks` package (never by hifi's code), the rest as a receiver
reads them (respx)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import respx
import standardwebhooks
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from config.catalog import Catalog
from config.destination import Destination
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.rebatch import Batch
from connector.sender import HttpxSender
from hifi.envelope import Event, parse_records
from hifi.headers import header_map
from tests.helpers import FakeKafka, Sleeps

URL = "https://hooks.test/in"
HEAD = f'url = "{URL}"\nsource_topics = ["src"]\nlocal_retry_max_backoff_s = 0.05\n'
OLD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NEW_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
EVENT_TIME_MS = 1_764_849_600_123  # 2025-12-04T12:00:00.123Z


def _dest(catalog_dir: Path, text: str) -> Destination:
    (catalog_dir / "hook.toml").write_text(HEAD + text)
    return Catalog(catalog_dir, {}).load("hook")


def _event(
    offset: int,
    value: dict[str, Any] | bytes,
    *,
    key: bytes | None = None,
    headers: list[tuple[str, bytes | None]] | None = None,
) -> Event:
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    record = ConsumerRecord(
        "src", 2, offset, 1, 0, key, raw, None, len(key or b""), len(raw), headers or ()
    )
    parsed = parse_records(
        TopicPartition("src", 2),
        [record],
        id_field="id",
        event_time_field="t",
        max_bytes=1 << 20,
        taken_ms=1,
    )
    return parsed.events[0]


async def _deliver(dest: Destination, *batches: Batch) -> FakeKafka:
    kafka = FakeKafka()
    async with httpx.AsyncClient() as client:
        deliverer = Deliverer(
            HttpxSender(client, timeout_s=5.0), dest, Diverter(kafka, dest), sleep=Sleeps()
        )
        for batch in batches:
            await deliverer.deliver(batch)
    return kafka


def _headers(request: httpx.Request) -> dict[str, str]:
    return {name.lower(): value for name, value in request.headers.items()}


@respx.mock
async def test_single_sends_the_event_bytes_with_its_id(catalog_dir: Path) -> None:
    """The body is the record's value byte for byte; `webhook-id` its id; no batch key."""
    dest = _dest(
        catalog_dir, 'format = "single"\n[webhook]\ncontent_type = "application/cloudevents+json"\n'
    )
    value = b'{ "id" : "ev-1",\n "t": 5, "nested": {"a": [1, 2]} }'
    route = respx.post(URL).respond(204)
    await _deliver(dest, Batch([_event(7, value)]))
    request = route.calls[0].request
    assert request.content == value
    headers = _headers(request)
    assert headers["webhook-id"] == "ev-1"
    assert headers["content-type"] == "application/cloudevents+json"
    assert "idempotency-key" not in headers


@respx.mock
async def test_an_event_without_an_id_is_named_by_its_origin(catalog_dir: Path) -> None:
    dest = _dest(catalog_dir, 'format = "single"\n[webhook]\nid_header = "Idempotency-Key"\n')
    route = respx.post(URL).respond(200)
    await _deliver(dest, Batch([_event(41, {"t": 5})]))
    assert _headers(route.calls[0].request)["idempotency-key"] == "src/2/41"


@respx.mock
async def test_standard_webhooks_verify_with_either_secret_at_every_attempt(
    catalog_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each attempt is signed at its own time with every secret (a rotation); the receiver's
    library verifies each attempt with the old secret alone and with the new alone; the id
    is the same on every attempt."""
    dest = _dest(
        catalog_dir,
        'format = "single"\n[signing]\nkind = "standard_webhooks"\n'
        f'secrets = ["{OLD_SECRET}", "{NEW_SECRET}"]\n',
    )
    started = time.time()
    calls = iter(range(100))
    clock = types.SimpleNamespace(
        time=lambda: started + 7 * next(calls), perf_counter=time.perf_counter
    )
    monkeypatch.setattr("connector.delivery.time", clock)
    route = respx.post(URL).mock(side_effect=[httpx.Response(503), httpx.Response(200)])
    await _deliver(dest, Batch([_event(1, {"id": "ev-9", "t": 5, "x": "é"})]))
    assert route.call_count == 2
    seen = []
    for call in route.calls:
        headers = _headers(call.request)
        seen.append((headers["webhook-id"], headers["webhook-timestamp"]))
        for secret in (OLD_SECRET, NEW_SECRET):
            body = standardwebhooks.Webhook(secret).verify(call.request.content, headers)
            assert body["id"] == "ev-9"
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            standardwebhooks.Webhook("whsec_" + base64.b64encode(b"k" * 24).decode()).verify(
                call.request.content, headers
            )
    assert seen[0][0] == seen[1][0] == "ev-9"
    assert seen[0][1] != seen[1][1]  # signed again, at the second attempt's time


@respx.mock
async def test_standard_webhooks_in_a_batch_format_sign_the_batch_by_its_key(
    catalog_dir: Path,
) -> None:
    """In json_array the `webhook-id` is the batch's `Idempotency-Key`."""
    dest = _dest(
        catalog_dir, f'[signing]\nkind = "standard_webhooks"\nsecrets = ["{NEW_SECRET}"]\n'
    )
    route = respx.post(URL).respond(200)
    await _deliver(dest, Batch([_event(1, {"id": "a", "t": 5}), _event(2, {"id": "b", "t": 5})]))
    request = route.calls[0].request
    headers = _headers(request)
    assert headers["webhook-id"] == headers["idempotency-key"]
    events = standardwebhooks.Webhook(NEW_SECRET).verify(request.content, headers)
    assert [event["id"] for event in events] == ["a", "b"]


@respx.mock
async def test_hmac_sha256_in_the_catalogs_header(catalog_dir: Path) -> None:
    """GitHub's convention: `sha256=` and the hex HMAC of the body as sent."""
    secret = "a-shared-secret-of-some-length"
    dest = _dest(
        catalog_dir,
        'format = "single"\n[signing]\nkind = "hmac_sha256"\nheader = "X-Hub-Signature-256"\n'
        f'prefix = "sha256="\nsecrets = ["{secret}"]\n',
    )
    route = respx.post(URL).respond(200)
    await _deliver(dest, Batch([_event(1, {"id": "a", "t": 5})]))
    request = route.calls[0].request
    expected = hmac.new(secret.encode(), request.content, hashlib.sha256).hexdigest()
    assert _headers(request)["x-hub-signature-256"] == f"sha256={expected}"
    assert "webhook-signature" not in _headers(request)


@respx.mock
async def test_cloudevents_binary_mode(catalog_dir: Path) -> None:
    """`ce-*` headers: the id, the templates rendered with where the event entered, its time."""
    dest = _dest(
        catalog_dir,
        'format = "single"\n[webhook.cloudevents]\n'
        'source = "/kafka/{topic}/{partition}"\ntype = "com.example.{destination}.v1"\n',
    )
    route = respx.post(URL).respond(200)
    await _deliver(dest, Batch([_event(3, {"id": "ce-1", "t": EVENT_TIME_MS})]))
    headers = _headers(route.calls[0].request)
    assert headers["ce-specversion"] == "1.0"
    assert headers["ce-id"] == "ce-1"
    assert headers["ce-source"] == "/kafka/src/2"
    assert headers["ce-type"] == "com.example.hook.v1"
    assert headers["ce-time"] == "2025-12-04T12:00:00.123Z"
    parsed = datetime.fromisoformat(headers["ce-time"])
    assert parsed == datetime.fromtimestamp(EVENT_TIME_MS / 1000, tz=UTC)


@respx.mock
async def test_record_headers_and_key_become_request_headers(catalog_dir: Path) -> None:
    """Named record headers (the last of a name) and the key; absent ones are left out."""
    dest = _dest(
        catalog_dir,
        'format = "single"\n[webhook]\nkey_header = "X-Kafka-Key"\n'
        '[webhook.record_headers]\ntraceparent = "traceparent"\ntenant = "X-Tenant"\n'
        'absent = "X-Absent"\n',
    )
    route = respx.post(URL).respond(200)
    event = _event(
        1,
        {"id": "a", "t": 5},
        key=b"user-42",
        headers=[
            ("tenant", b"old"),
            ("tenant", b"acme"),
            ("traceparent", b"00-ab-cd-01"),
            ("other", b"x"),
        ],
    )
    await _deliver(dest, Batch([event]))
    headers = _headers(route.calls[0].request)
    assert headers["x-kafka-key"] == "user-42"
    assert headers["x-tenant"] == "acme"
    assert headers["traceparent"] == "00-ab-cd-01"
    assert "x-absent" not in headers
    assert "other" not in headers


@respx.mock
@pytest.mark.parametrize(
    ("value", "key", "record_header"),
    [
        ({"id": "line\nbreak", "t": 5}, None, None),
        ({"id": "caf\u00e9", "t": 5}, None, None),
        ({"id": "ok", "t": 5}, b"\xff\xfe", None),
        ({"id": "ok", "t": 5}, None, b"two\r\nlines"),
    ],
)
async def test_an_unsendable_header_value_dead_letters_the_event_unsent(
    catalog_dir: Path, value: dict[str, Any], key: bytes | None, record_header: bytes | None
) -> None:
    """An id, key or record header that is not printable ASCII on one line: a dead letter
    `bad_header`, no request, the next event still delivered."""
    dest = _dest(
        catalog_dir,
        'format = "single"\n[webhook]\nkey_header = "X-Key"\nrecord_headers = { h = "X-H" }\n',
    )
    route = respx.post(URL).respond(200)
    headers: list[tuple[str, bytes | None]] | None = (
        [("h", record_header)] if record_header is not None else None
    )
    kafka = await _deliver(
        dest,
        Batch([_event(1, value, key=key, headers=headers)]),
        Batch([_event(2, {"id": "next", "t": 5})]),
    )
    assert route.call_count == 1
    assert _headers(route.calls[0].request)["webhook-id"] == "next"
    (letter,) = [record for record in kafka.records if record[0] == "hook.dlq"]
    meta = header_map(letter[3])
    assert meta["hifi-reason"] == b"bad_header"
    assert letter[2] == orjson.dumps(value)
