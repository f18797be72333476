"""Status policy, local retries, Retry-After and bisection, with a transport-level fake (respx)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import orjson
import pytest
import respx

from config.destination import Destination
from connector.delivery import Deliverer, parse_retry_after
from connector.divert import Diverter
from connector.metrics import REPLY_ANOMALIES
from connector.rebatch import Batch
from connector.sender import HttpxSender
from hifi.envelope import Event
from hifi.errors import BrokerUnavailable
from hifi.headers import header_map
from tests.helpers import FakeKafka, Sleeps, make_destination, make_event

URL = "https://collector.test/v1/events"


def _event(i: int) -> Event:
    return make_event(i, user_headers=[("trace", b"abc")])


@pytest.fixture
def dest(catalog_dir: Path) -> Destination:
    return make_destination(
        catalog_dir,
        "unit",
        URL,
        "src",
        local_retry_attempts=3,
        local_retry_max_backoff_s=0.5,
        retry_after_max_s=5.0,
        headers={"Authorization": "Bearer sekret-token-123"},
    )


def _deliverer(
    dest: Destination, kafka: FakeKafka, sleeps: Sleeps
) -> tuple[Deliverer, httpx.AsyncClient]:
    client = httpx.AsyncClient()
    return Deliverer(
        HttpxSender(client, timeout_s=dest.request_timeout_s),
        dest,
        Diverter(kafka, dest),
        sleep=sleeps,
    ), client


@respx.mock
async def test_2xx_delivers_with_configured_headers(dest: Destination) -> None:
    """A 2xx delivers the batch once, with the configured header and a JSON content type."""
    route = respx.post(URL).respond(202)
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(1), _event(2)]))
    assert route.call_count == 1
    request = route.calls[0].request
    assert request.headers["authorization"] == "Bearer sekret-token-123"
    assert request.headers["content-type"] == "application/json"
    assert kafka.records == []
    assert sleeps.calls == []


@respx.mock
@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422])
async def test_4xx_is_never_retried(dest: Destination, status: int) -> None:
    """A single-event request rejected with a 4xx other than 429 goes to the DLQ after one attempt."""
    route = respx.post(URL).respond(status, text="nope")
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(1)]))
    assert route.call_count == 1
    assert kafka.ids("unit.dlq") == ["e1"]
    headers = header_map(kafka.records[0][3])
    assert headers["hifi-reason"] == b"http_4xx"
    assert headers["hifi-status"] == str(status).encode()
    assert headers["trace"] == b"abc"


@respx.mock
@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_retryable_statuses_are_retried_then_handed_off(
    dest: Destination, status: int
) -> None:
    """429 and 5xx are tried local_retry_attempts times, then every event goes to retry_in."""
    route = respx.post(URL).respond(status)
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(1), _event(2)]))
    assert route.call_count == 3
    assert len(sleeps.calls) == 2
    assert all(0 <= s <= 0.5 for s in sleeps.calls)
    assert kafka.ids("unit.retry_in") == ["e1", "e2"]


@respx.mock
async def test_timeouts_and_connection_errors_are_retried(dest: Destination) -> None:
    """A timeout then a refused connection then a 200 delivers without a hand-off."""
    route = respx.post(URL).mock(
        side_effect=[httpx.ReadTimeout("slow"), httpx.ConnectError("refused"), httpx.Response(200)]
    )
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(1)]))
    assert route.call_count == 3
    assert kafka.records == []


@respx.mock
async def test_retry_after_is_honoured_and_capped(dest: Destination) -> None:
    """Retry-After in seconds is waited out exactly, and a longer one is capped at retry_after_max_s."""
    respx.post(URL).mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": "2"}),
            httpx.Response(503, headers={"Retry-After": "3600"}),
            httpx.Response(200),
        ]
    )
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(1)]))
    assert sleeps.calls == [2.0, 5.0]


@respx.mock
@pytest.mark.parametrize("value", ["\u00b2", "1\u0663", "9" * 40, "Wed, 99 Foo 99999 99:99:99 GMT"])
async def test_an_unreadable_retry_after_is_ignored_and_counted(
    dest: Destination, value: str
) -> None:
    """`Retry-After: ²` passes `str.isdigit()` and `float()` refuses it: once, that crashed the
    connector in a loop. Any value that does not parse is ignored (the backoff's own wait
    stands) and counted as an anomaly; a huge one is capped."""
    respx.post(URL).mock(
        side_effect=[
            httpx.Response(503, headers=[(b"Retry-After", value.encode())]),
            httpx.Response(200),
        ]
    )
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    anomalies = REPLY_ANOMALIES.labels(dest.name, "retry_after")
    before = anomalies._value.get()
    async with client:
        await deliverer.deliver(Batch([_event(1)]))
    assert kafka.ids("unit.retry_in") == []
    (slept,) = sleeps.calls
    assert 0 <= slept <= dest.retry_after_max_s
    assert anomalies._value.get() - before == (0 if value.isascii() and value.isdigit() else 1)


def test_retry_after_parses_seconds_and_http_dates() -> None:
    """Both Retry-After forms are understood; garbage is ignored."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(later, now_s=now.timestamp()) == pytest.approx(90.0)
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


@respx.mock
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_handed_off_whole_as_the_destination_moved(
    dest: Destination, status: int
) -> None:
    """A 3xx not followed says the destination moved: one request, no local retry, the whole
    batch handed to the retrier with cause redirect (never dead-lettered, never bisected), the
    error naming the Location, and the breaker counts a failure."""
    route = respx.post(URL).respond(status, headers={"Location": "https://elsewhere.test/"})
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(i) for i in range(4)]))
    assert route.call_count == 1
    assert kafka.ids("unit.dlq") == []
    assert kafka.ids("unit.retry_in") == ["e0", "e1", "e2", "e3"]
    headers = [header_map(r[3]) for r in kafka.records]
    assert {h["hifi-cause"] for h in headers} == {b"redirect"}
    assert all(b"https://elsewhere.test/" in h["hifi-error"] for h in headers)
    assert deliverer.breakers.of(None).failures == 1


@respx.mock
async def test_bisection_isolates_each_rejected_event(dest: Destination) -> None:
    """Two poison events among 16 are found by splitting; the other 14 are delivered."""
    poison = {"e3", "e12"}
    delivered: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        ids = [e["id"] for e in orjson.loads(request.content)]
        if poison & set(ids):
            return httpx.Response(400, json={"error": "bad event"})
        delivered.extend(ids)
        return httpx.Response(200)

    route = respx.post(URL).mock(side_effect=answer)
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(i) for i in range(16)]))
    assert sorted(kafka.ids("unit.dlq")) == ["e12", "e3"]
    assert sorted(delivered) == sorted(f"e{i}" for i in range(16) if f"e{i}" not in poison)
    assert route.call_count <= 1 + 2 * 4 * 2


@respx.mock
async def test_bisection_budget_bounds_requests(catalog_dir: Path) -> None:
    """When every event is rejected the number of requests stays within the bisection budget."""
    dest = make_destination(catalog_dir, "budget", URL, "src", max_bisect_requests=6)
    route = respx.post(URL).respond(400)  # an event-level refusal (a 401 is not bisected)
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(i) for i in range(64)]))
    assert route.call_count <= 1 + 6
    assert sorted(kafka.ids("budget.dlq")) == sorted(f"e{i}" for i in range(64))


@respx.mock
async def test_secrets_never_reach_dead_letter_errors(dest: Destination) -> None:
    """A destination echoing our token in its error body does not leak it into hifi-error."""
    respx.post(URL).respond(400, text="bad token Bearer sekret-token-123")
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(1)]))
    error = header_map(kafka.records[0][3])["hifi-error"]
    assert b"sekret-token-123" not in error
    assert b"***" in error


@respx.mock
async def test_broker_failure_on_hand_off_propagates(dest: Destination) -> None:
    """If Kafka cannot take a hand-off the error surfaces, so the offset is never committed."""
    respx.post(URL).respond(503)
    kafka, sleeps = FakeKafka(fail=True), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        with pytest.raises(BrokerUnavailable):
            await deliverer.deliver(Batch([_event(1)]))


@respx.mock
async def test_gzip_and_ndjson_bodies(catalog_dir: Path) -> None:
    """With gzip and ndjson the body is compressed NDJSON with the matching headers."""
    import gzip

    dest = make_destination(catalog_dir, "gz", URL, "src", compression="gzip", format="ndjson")
    route = respx.post(URL).respond(200)
    kafka, sleeps = FakeKafka(), Sleeps()
    deliverer, client = _deliverer(dest, kafka, sleeps)
    async with client:
        await deliverer.deliver(Batch([_event(1), _event(2)]))
    request = route.calls[0].request
    assert request.headers["content-encoding"] == "gzip"
    assert request.headers["content-type"] == "application/x-ndjson"
    lines = gzip.decompress(request.content).decode().splitlines()
    assert [orjson.loads(line)["id"] for line in lines] == ["e1", "e2"]
