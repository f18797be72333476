"""The ingest API over real HTTP on loopback and the real broker: formats, results, auth, limits, bad input."""

from __future__ import annotations

import gzip
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest

from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from ingest.service import IngestService
from tests.ingest.support import OTHER_TOKEN, auth, make_topic, serving, streams_dir, url

pytestmark = [pytest.mark.integration]

JSON = {"content-type": "application/json"}
NDJSON = {"content-type": "application/x-ndjson"}
LIMITS = {"max_body_bytes": 64 * 1024, "max_events_per_request": 50, "max_event_bytes": 2048}


@dataclass
class Api:
    service: IngestService
    client: httpx.AsyncClient
    topic: str
    settings: KafkaSettings

    async def post(
        self, body: Any, headers: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        sent = {**JSON, **auth(), **(headers or {})}
        return await self.client.post(url(self.service, **kw), content=content, headers=sent)

    async def records(self, ids: set[str]) -> dict[str, Any]:
        """The topic's records whose key is one of `ids`, by key (waits for all)."""
        found: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while set(found) < ids and time.monotonic() < deadline:
            for record in await read_topic(self.settings, self.topic):
                key = record.key.decode() if record.key else ""
                if key in ids:
                    found[key] = record
        return found


@pytest.fixture(scope="module")
async def api(
    kafka_settings: KafkaSettings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Api]:
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path_factory.mktemp("ingest"), topic, **LIMITS)
    async with (
        serving(directory, kafka_settings) as service,
        httpx.AsyncClient(timeout=30) as client,
    ):
        yield Api(service, client, topic, kafka_settings)


def ids(count: int) -> list[str]:
    prefix = uuid.uuid4().hex[:8]
    return [f"{prefix}-{n}" for n in range(count)]


async def test_one_object_is_accepted_once_kafka_holds_it(api: Api) -> None:
    """200 with its id, partition and offset; the record is keyed by the id, its value the event's bytes."""
    (event_id,) = ids(1)
    body = b'{"id": "' + event_id.encode() + b'", "event_time": 1700000000000, "x": 1.50}'
    response = await api.post(body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["accepted"] == 1
    assert answer["rejected"] == 0
    (result,) = answer["results"]
    assert result["status"] == "accepted"
    assert result["id"] == event_id
    record = (await api.records({event_id}))[event_id]
    assert (record.partition, record.offset) == (result["partition"], result["offset"])
    assert record.value == body
    assert not record.headers


async def test_mixed_events_are_207_with_a_result_each_in_order(api: Api) -> None:
    """Valid events are produced, invalid ones rejected with a reason, in the order sent."""
    a, b = ids(2)
    body = (
        b'[{"id": "'
        + a.encode()
        + b'"}, 5, {"id": ""}, {"id": "'
        + b.encode()
        + b'", "v": "\xff"}, {"id": "'
        + b.encode()
        + b'"}]'
    )
    response = await api.post(body)
    assert response.status_code == 207, response.text
    answer = response.json()
    assert (answer["accepted"], answer["rejected"]) == (2, 3)
    statuses = [(r["status"], r.get("reason")) for r in answer["results"]]
    assert statuses == [
        ("accepted", None),
        ("rejected", "not_an_object"),
        ("rejected", "invalid_id"),
        ("rejected", "not_utf8"),
        ("accepted", None),
    ]
    assert set(await api.records({a, b})) == {a, b}


async def test_ndjson_and_gzip_bodies_are_read(api: Api) -> None:
    """NDJSON by Content-Type, gzip by Content-Encoding; both answer 200."""
    a, b, c = ids(3)
    ndjson = f'{{"id": "{a}"}}\n\n{{"id": "{b}"}}\n'.encode()
    response = await api.post(ndjson, NDJSON)
    assert response.status_code == 200, response.text
    zipped = gzip.compress(orjson.dumps([{"id": c}]))
    response = await api.post(zipped, {"content-encoding": "gzip"})
    assert response.status_code == 200, response.text
    assert set(await api.records({a, b, c})) == {a, b, c}


async def test_a_generated_id_and_an_arrival_time_reach_kafka(api: Api) -> None:
    """An event without id gets one written in; one without time is flagged on its record."""
    response = await api.post([{"seq": 1}])
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    assert result["id_generated"] is True
    assert result["event_time"] == "arrival"
    record = (await api.records({result["id"]}))[result["id"]]
    assert orjson.loads(record.value) == {"id": result["id"], "seq": 1}
    assert list(record.headers) == [("hifi-event-time", b"arrival")]


async def test_no_valid_event_is_400_and_nothing_is_produced(api: Api) -> None:
    """Every event rejected: 400, each with its reason."""
    response = await api.post(b'[1, "a", {"id": false}]')
    assert response.status_code == 400
    assert [r["reason"] for r in response.json()["results"]] == [
        "not_an_object",
        "not_an_object",
        "invalid_id",
    ]


@pytest.mark.parametrize(
    ("headers", "stream", "status"),
    [
        ({}, "clicks", 401),
        ({"authorization": "Bearer wrong"}, "clicks", 401),
        ({"authorization": "Basic dXNlcjpwYXNz"}, "clicks", 401),
        (auth(OTHER_TOKEN), "clicks", 403),
        (auth(), "nosuch", 404),
        ({}, "nosuch", 401),
    ],
)
async def test_auth_failures(api: Api, headers: dict[str, str], stream: str, status: int) -> None:
    """No or an unknown token: 401; another stream's token: 403; an unknown stream: 404."""
    sent = {**JSON, **headers}
    response = await api.client.post(url(api.service, stream), content=b"{}", headers=sent)
    assert response.status_code == status
    assert "error" in response.json()
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("body", "headers", "limit"),
    [
        (b"[" + b"{}," * 60 + b"{}]", {}, "max_events_per_request"),
        (orjson.dumps([{"x": "y" * 3000}]), {}, "max_event_bytes"),
        (orjson.dumps([{"x": "y" * 1500}] * 50), {}, "max_body_bytes"),
        (
            gzip.compress(b"[" + b" " * 10_000_000 + b"]"),
            {"content-encoding": "gzip"},
            "max_body_bytes",
        ),
    ],
)
async def test_every_limit_is_413_naming_it(
    api: Api, body: bytes, headers: dict[str, str], limit: str
) -> None:
    """Over events per request, bytes per event, body bytes (gunzipped too): 413 with the limit."""
    response = await api.post(body, headers)
    assert response.status_code == 413
    assert response.json()["limit"] == limit
    assert limit in response.json()["error"]


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b'{"id": "a", "x": [1, 2', {}, 400),
        (b"", {}, 400),
        (b"   ", {}, 400),
        (b"null", {}, 400),
        (b'"just a string"', {}, 400),
        (b"[" * 20_000 + b"]" * 20_000, {}, 400),
        (b'{"x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", {}, 413),  # over max_event_bytes
        (b"[" * 1020 + b"]" * 1020, {}, 400),
        (b'{"id": "a", "t": "\xc3\x28"}', {}, 400),
        (b'{"id": 123456789012345678901234567890123456789012}', {}, 400),
        (b"\x1f\x8b\x08\x00garbage", {"content-encoding": "gzip"}, 400),
        (b"{}", {"content-type": "text/plain"}, 415),
        (b"{}", {"content-type": ""}, 415),
        (b"{}", {"content-encoding": "br"}, 415),
    ],
)
async def test_bad_input_is_a_clear_4xx(
    api: Api, body: bytes, headers: dict[str, str], status: int
) -> None:
    """Truncated JSON, wrong types, deep nesting, huge numbers, invalid UTF-8, empty body: a 4xx that says why."""
    response = await api.post(body, headers)
    assert response.status_code == status, response.text
    answer = response.json()
    assert answer.get("error") or answer.get("results")


async def test_wrong_method_and_path(api: Api) -> None:
    """GET is 405 with Allow: POST; a path that is not an events path is 404."""
    response = await api.client.get(url(api.service), headers=auth())
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    for path in ("/", "/v1/events/", "/v1/events/a/b", "/v2/events/clicks", "/v1/events/%2e%2e"):
        response = await api.client.post(
            f"http://127.0.0.1:{api.service.port}{path}", content=b"{}", headers={**JSON, **auth()}
        )
        assert response.status_code == 404, path


async def test_metrics_count_requests_and_events(api: Api) -> None:
    """The ops port serves hifi_ingest_* by stream and status."""
    assert api.service.ops is not None
    await api.post([{"id": "m-1", "event_time": int(time.time() * 1000) - 1500}])
    text = (await api.client.get(f"http://127.0.0.1:{api.service.ops.port}/metrics")).text
    assert 'hifi_ingest_requests_total{status="200",stream="clicks"}' in text
    assert 'hifi_ingest_events_accepted_total{stream="clicks"}' in text
    assert 'hifi_ingest_lag_in_seconds_count{stream="clicks"}' in text
    assert 'hifi_ingest_requests_total{status="404",stream="-"}' in text
    ready = await api.client.get(f"http://127.0.0.1:{api.service.ops.port}/readyz")
    assert ready.status_code == 200
