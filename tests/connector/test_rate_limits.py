"""Rate limits on a fake clock: the buckets, the tenant routes' buckets, what is cut, what each attempt takes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import respx
from prometheus_client import REGISTRY

from config.catalog import Catalog
from config.destination import Destination
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.pacing import Pacer
from connector.rate_limits import RateLimits
from connector.rebatch import Batch
from connector.sender import HttpxSender
from connector.tenant_pending import TenantPending
from hifi.errors import ConfigError
from tests.helpers import FakeKafka, Sleeps, make_destination, make_event, until
from tests.tenants.support import route_of, tenant_events, write_tenant_destination

URL = "https://collector.test/v1/events"
TENANT_URL = "https://collector.test/{region}/v1/{tenant}/events"
VALUES = {"api_key": "k-0123456789abcdef", "region": "eu"}


class Clock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self, *, advance: bool = True) -> None:
        self.now_s = 1000.0
        self.slept: list[float] = []
        self._advance = advance  # False: a sleep returns at once and the time stays

    def __call__(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self._advance:
            self.now_s += seconds


def _limits(dest: Destination, clock: Clock) -> RateLimits:
    return RateLimits(dest, clock_s=clock, sleep=clock.sleep)


def _batch(events: int, start: int = 0) -> Batch:
    return Batch([make_event(i) for i in range(start, start + events)])


def test_the_bucket_resizes_keeping_its_debt() -> None:
    """A new rate applies from now on; the debt is kept and is repaid at the new rate."""
    clock = Clock()
    bucket = Pacer(10.0, burst=10.0, clock_s=clock)
    assert bucket.reserve(30) == pytest.approx(2.0)  # 10 in hand, 20 owed at 10/s
    assert bucket.owed_s() == pytest.approx(2.0)
    bucket.resize(20.0, burst=20.0)
    assert bucket.owed_s() == pytest.approx(1.0)
    clock.now_s += 1.0
    assert bucket.owed_s() == 0.0
    clock.now_s += 60.0  # idle: at most one burst is saved up, at the new size
    assert bucket.reserve(20) == 0.0
    assert bucket.reserve(1) == pytest.approx(0.05)


async def test_events_go_at_the_rate_after_a_burst_of_one_second(catalog_dir: Path) -> None:
    """At 100 events a second, 1,000 events in batches of 50 take 9 s: the first second's
    worth goes at once, then each batch waits for its tokens; the waits are counted."""
    dest = make_destination(catalog_dir, "rl-events", URL, "src", rate_limit_events_per_s=100.0)
    clock = Clock()
    limits = _limits(dest, clock)
    started_s = clock.now_s
    sent_at = []
    for index in range(20):
        await limits.take(_batch(50, index * 50))
        sent_at.append(clock.now_s - started_s)
    assert sent_at[:2] == [0.0, 0.0]
    assert sent_at[-1] == pytest.approx(9.0)
    assert sent_at[2] == pytest.approx(0.5)
    wait_total = REGISTRY.get_sample_value(
        "hifi_connector_rate_limit_wait_seconds_total", {"dest": "rl-events"}
    )
    assert wait_total == pytest.approx(9.0)
    assert REGISTRY.get_sample_value(
        "hifi_connector_rate_limit_per_s", {"dest": "rl-events", "unit": "events"}
    ) == pytest.approx(100.0)


async def test_a_batch_above_the_burst_goes_and_the_next_one_pays(catalog_dir: Path) -> None:
    """A batch of 500 events at 100 a second is not refused: it goes at once (the burst),
    taking a debt of 400 tokens, and the next request waits 4 s plus its own share."""
    dest = make_destination(catalog_dir, "rl-debt", URL, "src", rate_limit_events_per_s=100.0)
    clock = Clock()
    limits = _limits(dest, clock)
    await limits.take(_batch(500))
    assert clock.slept == [pytest.approx(4.0)]  # 100 in hand, 400 owed
    await limits.take(_batch(100))
    assert clock.slept[1] == pytest.approx(1.0)


async def test_requests_per_second_count_requests_not_events(catalog_dir: Path) -> None:
    """At 2 requests a second, requests of any size go two at once, then one per half second;
    an empty batch (a breaker's probe) takes a request token too."""
    dest = make_destination(catalog_dir, "rl-req", URL, "src", rate_limit_requests_per_s=2.0)
    clock = Clock()
    limits = _limits(dest, clock)
    for size in (500, 1, 0, 7):
        await limits.take(_batch(size))
    assert clock.slept == [pytest.approx(0.5), pytest.approx(0.5)]


async def test_a_cancelled_wait_gives_its_tokens_back(catalog_dir: Path) -> None:
    """A request cancelled while it waits (a drain deadline) returns its tokens: the next one
    waits only for its own."""
    dest = make_destination(catalog_dir, "rl-cancel", URL, "src", rate_limit_events_per_s=10.0)
    limits = RateLimits(dest)
    await limits.take(_batch(10))
    waiting = asyncio.create_task(limits.take(_batch(1000)))
    assert await until(lambda: limits.describe()["waiting_requests"] == 1, 30, interval_s=0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert limits.describe()["waiting_requests"] == 0
    assert limits.describe()["owed_s"] < 1.1  # the 10 of the burst, not 1,000 more


async def test_a_tenant_route_has_its_own_buckets_besides_the_destinations(
    catalog_dir: Path,
) -> None:
    """A limited tenant waits for its route's tokens; an unlimited tenant of the same
    destination does not; changing the entry re-sizes the route's buckets, removing the limit
    forgets them."""
    dest = write_tenant_destination(catalog_dir, "rl-tenants", TENANT_URL, "events")
    clock = Clock()
    limits = _limits(dest, clock)
    slow = route_of(dest, "slow", values=VALUES, rate_limit_events_per_s=10)
    fast = route_of(dest, "fast", values=VALUES)
    for _ in range(3):
        await limits.take(Batch([make_event(i) for i in range(10)], slow))
        await limits.take(Batch([make_event(i) for i in range(100)], fast))
    assert clock.slept == [pytest.approx(1.0), pytest.approx(1.0)]
    assert limits.describe()["limited_routes"] == 1
    faster = route_of(dest, "slow", values=VALUES, rate_limit_events_per_s=100)
    await limits.take(Batch([make_event(i) for i in range(10)], faster))  # 10 owed at 100/s
    assert clock.slept[-1] == pytest.approx(0.1)
    await limits.take(Batch([make_event(0)], route_of(dest, "slow", values=VALUES)))
    assert limits.describe()["limited_routes"] == 0
    assert len(clock.slept) == 3


def test_the_connector_passes_over_a_tenant_that_owes_tokens(catalog_dir: Path) -> None:
    """While a limited tenant's batch is cut and not yet counted, or its route owes tokens,
    the other tenants' batches are cut first, so its waiting does not take their slots; with
    no other tenant waiting nothing is sendable."""
    dest = write_tenant_destination(catalog_dir, "rl-cut", TENANT_URL, "events")
    clock = Clock(advance=False)
    limits = _limits(dest, clock)
    routes = {
        "slow": route_of(dest, "slow", values=VALUES, rate_limit_events_per_s=10),
        "fast": route_of(dest, "fast", values=VALUES),
    }
    pending = TenantPending(
        routes.get,
        tenant_field="customer",
        max_records=10,
        max_bytes=1 << 20,
        holds_back=limits.holds_back,
    )
    pending.extend(tenant_events(["slow"] * 30 + ["fast"] * 20))
    first = _cut(pending)
    assert first.target is routes["slow"]
    limits.cut(first)
    assert [_cut(pending).target for _ in range(2)] == [routes["fast"]] * 2
    assert not pending.sendable()  # slow's batch was cut and has not taken its tokens
    limits.release(first)
    assert pending.sendable()
    limits.cut(first)
    asyncio.run(limits.take(first))  # takes the burst's 10 tokens, nothing owed yet
    second = _cut(pending)
    assert second.target is routes["slow"]
    asyncio.run(limits.take(second))  # 10 more: owed for 1 s
    assert not pending.sendable()
    assert limits.describe()["owing_routes"]["slow"]["owed_s"] == pytest.approx(1.0)
    clock.now_s += 1.0
    assert pending.sendable()


@respx.mock
async def test_each_local_attempt_takes_a_request_token(catalog_dir: Path) -> None:
    """A batch retried locally after two 503s costs three request tokens: the limit is what the
    destination sees."""
    dest = make_destination(catalog_dir, "rl-retry", URL, "src", rate_limit_requests_per_s=1.0)
    respx.post(URL).mock(
        side_effect=[httpx.Response(503), httpx.Response(503), httpx.Response(200)]
    )
    async with httpx.AsyncClient() as client:
        deliverer = Deliverer(
            HttpxSender(client, timeout_s=dest.request_timeout_s),
            dest,
            Diverter(FakeKafka(), dest),
            sleep=Sleeps(),
        )
        clock = Clock()
        deliverer.rate_limits = _limits(dest, clock)
        await deliverer.deliver(_batch(5))
    assert clock.slept == [pytest.approx(1.0), pytest.approx(1.0)]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", "greater than 0"),
        ("-1.5", "greater than 0"),
        ("nan", "finite number"),
        ("inf", "finite number"),
        ('"100"', "valid number"),
    ],
)
@pytest.mark.parametrize("key", ["rate_limit_events_per_s", "rate_limit_requests_per_s"])
def test_bad_rate_limits_are_one_line_errors(
    catalog_dir: Path, key: str, value: str, problem: str
) -> None:
    """A rate limit that is not a finite number above 0 names the file, the key and why."""
    (catalog_dir / "bad.toml").write_text(
        f'url = "{URL}"\nsource_topics = ["src"]\n{key} = {value}\n'
    )
    with pytest.raises(ConfigError) as caught:
        Catalog(catalog_dir).load("bad")
    message = str(caught.value)
    assert "bad.toml" in message
    assert key in message
    assert problem in message
    assert "\n" not in message


def _cut(pending: TenantPending) -> Batch:
    """The next batch (this pending never lingers: `max_linger_s` 0)."""
    batch = pending.next_batch()
    assert batch is not None
    return batch
