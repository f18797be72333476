"""The circuit breaker's state machine (a fake clock) and the status policy that feeds it (respx)."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
import respx
from prometheus_client import REGISTRY

from config.catalog import Catalog
from config.destination import Destination
from connector import metrics, status_page
from connector.breaker import Breaker, Breakers, BreakerState
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.rebatch import Batch
from connector.sender import HttpxSender
from hifi.errors import ConfigError
from hifi.headers import header_map
from tests.helpers import FakeKafka, Sleeps, make_destination, make_event

URL = "https://collector.test/v1/events"


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _breaker(clock: Clock, failures: int = 3, max_open_s: float = 8.0) -> Breaker:
    return Breaker(failures=failures, max_open_s=max_open_s, clock=clock)


def test_opens_after_consecutive_failures_only() -> None:
    """A 2xx between failures starts the count again; the threshold in a row opens it."""
    clock = Clock()
    breaker = _breaker(clock)
    breaker.failed("503")
    breaker.failed("503")
    breaker.succeeded()
    breaker.failed("503")
    breaker.failed("503")
    assert breaker.closed
    breaker.failed("503")
    assert (breaker.state, breaker.opens) == (BreakerState.OPEN, 1)


def test_backoff_doubles_from_one_second_to_the_cap_and_resets_on_close() -> None:
    """Each failed probe doubles the wait (1, 2, 4, 8, 8 s); a good probe closes and resets it."""
    clock = Clock()
    breaker = _breaker(clock, failures=1, max_open_s=8.0)
    breaker.failed("401")
    waits = []
    for _ in range(5):
        waits.append(breaker.wait_s())
        assert not breaker.probe_due()
        clock.now_s += breaker.wait_s()
        assert breaker.probe_due()
        breaker.begin_probe()
        assert breaker.state is BreakerState.HALF_OPEN
        assert not breaker.probe_due()  # one probe at a time
        breaker.probe_ended(ok=False, error="401")
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0]
    clock.now_s += breaker.wait_s()
    breaker.begin_probe()
    breaker.probe_ended(ok=True)
    assert breaker.state is BreakerState.CLOSED
    breaker.failed("401")
    assert breaker.wait_s() == 1.0
    assert breaker.opens == 2


def test_outcomes_of_requests_sent_before_it_opened_do_not_move_it() -> None:
    """Only the probe decides: late failures and successes of older requests are ignored."""
    clock = Clock()
    breaker = _breaker(clock, failures=1)
    breaker.failed("refused")
    breaker.succeeded()
    breaker.failed("refused")
    assert (breaker.state, breaker.opens) == (BreakerState.OPEN, 1)
    breaker.probe_ended(ok=True)  # no probe is out
    assert breaker.state is BreakerState.OPEN


def test_open_time_is_counted_while_not_closed() -> None:
    """Seconds open or half-open add up, and stop once it closes."""
    clock = Clock()
    breaker = _breaker(clock, failures=1)
    breaker.failed("x")
    clock.now_s += 1.0
    breaker.begin_probe()
    clock.now_s += 0.5
    breaker.probe_ended(ok=True)
    clock.now_s += 10.0
    breaker.settle_open_s()
    assert breaker.open_s_total == pytest.approx(1.5)


def test_route_breakers_open_alone_and_are_counted_not_labelled(catalog_dir: Path) -> None:
    """A tenant route's breaker opens without the destination's; the open routes are a count."""
    dest = make_destination(catalog_dir, "routes-unit", URL, "src", breaker_failures=2)
    breakers = Breakers(dest, clock=Clock())
    for _ in range(2):
        breakers.of("acme").failed("401")
    breakers.of("other").failed("401")
    assert breakers.destination.closed
    assert breakers.of("acme").state is BreakerState.OPEN
    assert breakers.open_routes() == 1
    gauge = REGISTRY.get_sample_value("hifi_connector_breaker_open_routes", {"dest": dest.name})
    opens = REGISTRY.get_sample_value("hifi_connector_breaker_opens_total", {"dest": dest.name})
    assert (gauge, opens) == (1.0, 1.0)
    assert list(breakers.describe()["routes"]) == ["acme"]  # type: ignore[call-overload]
    breakers.of("other").succeeded()
    breakers.forget_if_healthy("other")
    assert breakers.existing("other") is None


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ("destination_fault_statuses = [503]", "503 is not a 4xx status other than 429"),
        ("breaker_failures = 0", "breaker_failures"),
        ('breaker_probe = "full"', "breaker_probe"),
    ],
)
def test_bad_breaker_keys_are_one_line_errors(catalog_dir: Path, keys: str, problem: str) -> None:
    """A bad breaker key names the key and what is allowed, in one line."""
    (catalog_dir / "bad.toml").write_text(f'url = "{URL}"\nsource_topics = ["src"]\n{keys}\n')
    with pytest.raises(ConfigError) as caught:
        Catalog(catalog_dir).load("bad")
    message = str(caught.value)
    assert problem in message
    assert "\n" not in message


def _deliverer(dest: Destination, kafka: FakeKafka) -> tuple[Deliverer, httpx.AsyncClient]:
    client = httpx.AsyncClient()
    breakers = Breakers(dest, clock=Clock())
    deliverer = Deliverer(
        HttpxSender(client, timeout_s=dest.request_timeout_s),
        dest,
        Diverter(kafka, dest),
        sleep=Sleeps(),
        breakers=breakers,
    )
    return deliverer, client


@respx.mock
@pytest.mark.parametrize("status", [401, 403, 404, 405, 407])
async def test_a_destination_fault_is_not_bisected(catalog_dir: Path, status: int) -> None:
    """A 401-family batch costs one request: its events are dead-lettered whole, as http_4xx
    with the status, and the breaker counts one failure."""
    dest = make_destination(catalog_dir, f"fault{status}", URL, "src")
    route = respx.post(URL).respond(status, text="no")
    kafka = FakeKafka()
    deliverer, client = _deliverer(dest, kafka)
    async with client:
        await deliverer.deliver(Batch([make_event(i) for i in range(100)]))
    assert route.call_count == 1
    assert len(kafka.ids(f"fault{status}.dlq")) == 100
    headers = header_map(kafka.records[0][3])
    assert (headers["hifi-reason"], headers["hifi-status"]) == (b"http_4xx", str(status).encode())
    assert deliverer.breakers.destination.failures == 1


@respx.mock
async def test_event_level_4xx_is_bisected_and_not_counted(catalog_dir: Path) -> None:
    """A 400 is the events' fault: bisected as before, and no failure for the breaker."""
    dest = make_destination(catalog_dir, "eventlevel", URL, "src", breaker_failures=1)
    route = respx.post(URL).respond(400)
    kafka = FakeKafka()
    deliverer, client = _deliverer(dest, kafka)
    async with client:
        await deliverer.deliver(Batch([make_event(i) for i in range(4)]))
    assert route.call_count > 1
    assert deliverer.breakers.destination.state is BreakerState.CLOSED


@respx.mock
async def test_configured_fault_statuses_replace_the_default(catalog_dir: Path) -> None:
    """With `destination_fault_statuses = [418]` a 418 is not bisected and a 401 is."""
    dest = make_destination(
        catalog_dir, "teapot", URL, "src", destination_fault_statuses=[418], breaker_failures=9
    )
    kafka = FakeKafka()
    deliverer, client = _deliverer(dest, kafka)
    async with client:
        route = respx.post(URL).respond(418)
        await deliverer.deliver(Batch([make_event(i) for i in range(8)]))
        assert route.call_count == 1
        route = respx.post(URL).respond(401)
        await deliverer.deliver(Batch([make_event(i) for i in range(8)]))
        assert route.call_count > 1
    assert deliverer.breakers.destination.failures == 1


@respx.mock
async def test_5xx_counts_once_per_batch_after_local_retries(catalog_dir: Path) -> None:
    """A batch whose 503s outlast its local retries is handed off and counts one failure;
    with `breaker_failures` such batches in a row the breaker opens."""
    dest = make_destination(
        catalog_dir, "down5xx", URL, "src", local_retry_attempts=3, breaker_failures=2
    )
    route = respx.post(URL).respond(503)
    kafka = FakeKafka()
    deliverer, client = _deliverer(dest, kafka)
    breaker = deliverer.breakers.destination
    async with client:
        await deliverer.deliver(Batch([make_event(1)]))
        assert (route.call_count, breaker.failures, breaker.state) == (3, 1, BreakerState.CLOSED)
        await deliverer.deliver(Batch([make_event(2)]))
    assert breaker.state is BreakerState.OPEN
    assert sorted(kafka.ids("down5xx.retry_in")) == ["e1", "e2"]


@respx.mock
async def test_refused_connections_count_at_each_attempt(catalog_dir: Path) -> None:
    """A connection that cannot be made is a destination-level failure at once, each attempt."""
    dest = make_destination(
        catalog_dir, "refused", URL, "src", local_retry_attempts=3, breaker_failures=3
    )
    respx.post(URL).mock(side_effect=httpx.ConnectError("refused"))
    kafka = FakeKafka()
    deliverer, client = _deliverer(dest, kafka)
    async with client:
        await deliverer.deliver(Batch([make_event(1)]))
    assert deliverer.breakers.destination.state is BreakerState.OPEN
    assert kafka.ids("refused.retry_in") == ["e1"]


@respx.mock
@pytest.mark.parametrize(
    ("reply", "closes"), [(200, True), (400, True), (401, False), (503, False)]
)
async def test_the_probe_is_one_attempt_and_decides(
    catalog_dir: Path, reply: int, closes: bool
) -> None:
    """A probe is sent once: a reply about the events closes the breaker, a destination-level
    failure reopens it; an empty probe carries no event."""
    dest = make_destination(catalog_dir, f"probe{reply}", URL, "src", breaker_failures=1)
    route = respx.post(URL).respond(reply)
    kafka = FakeKafka()
    deliverer, client = _deliverer(dest, kafka)
    breaker = deliverer.breakers.destination
    breaker.failed("earlier")
    async with client:
        await deliverer.probe(Batch([]), breaker)
    assert route.call_count == 1
    assert route.calls[0].request.content == b"[]"
    assert breaker.state is (BreakerState.CLOSED if closes else BreakerState.OPEN)
    assert kafka.records == []


def test_status_survives_a_lag_beyond_the_last_bucket() -> None:
    """Events older than the top lag bucket (a replay of last week) leave /status valid JSON."""
    metrics.LAG_OUT.labels("ancient", "first").observe_ages(10 * 86_400_000.0, [0.0])
    now = status_page.Snapshot(False, 0, 0, {}, None, [])
    document = status_page.document("ancient", url=URL, ready=True, now=now)
    assert document["health"]["lag_out_p95_s_since_start"] == "+Inf"
    orjson.dumps(document)
