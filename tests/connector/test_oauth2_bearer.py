"""A destination with `[auth]`: requests carry the bearer token, a 401 refreshes it and resends
that request once (counted), a second 401 is an ordinary refusal, a token that cannot be had
is the destination's failure (handed off, never dead-lettered), and `--probe` fetches one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import respx
from prometheus_client import REGISTRY

from config.catalog import Catalog
from config.destination import Destination
from connector import bearer
from connector.bearer import Bearer
from connector.check import probe_token
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.rebatch import Batch
from connector.sender import HttpxSender
from hifi.check import CheckReport
from hifi.errors import TokenRefused
from tests.helpers import FakeKafka, Sleeps, make_event
from tests.hifi.oauth2_server import OAuth2Server

URL = "https://collector.test/v1/events"


def write_auth_destination(
    catalog_dir: Path, name: str, url: str, token_url: str, **keys: object
) -> None:
    """A catalog file for `url` whose `[auth]` gets tokens from `token_url` as client
    "hifi-test" with the secret in ${IDP_SECRET}."""
    lines = [f'url = "{url}"', f'source_topics = ["{keys.pop("topic", "src")}"]']
    lines += [f"{key} = {value!r}" for key, value in keys.items()]
    lines += [
        "[auth]",
        'kind = "oauth2_client_credentials"',
        f'token_url = "{token_url}"',
        'client_id = "hifi-test"',
        'client_secret = "${IDP_SECRET}"',
        'scopes = ["events:write"]',
    ]
    (catalog_dir / f"{name}.toml").write_text("\n".join(lines) + "\n")


def _refreshes(dest: str, reason: str) -> float:
    labels = {"dest": dest, "reason": reason}
    return REGISTRY.get_sample_value("hifi_connector_auth_refreshes_total", labels) or 0.0


@pytest.fixture
async def server() -> AsyncIterator[OAuth2Server]:
    async with OAuth2Server() as running:
        yield running


def _load(catalog_dir: Path, name: str, server: OAuth2Server) -> Destination:
    write_auth_destination(catalog_dir, name, URL, server.token_url, local_retry_attempts=2)
    return Catalog(catalog_dir, {"IDP_SECRET": server.client_secret}).load(name)


async def _deliver(
    dest: Destination, answers: list[httpx.Response], kafka: FakeKafka
) -> list[httpx.Request]:
    """Deliver one event of one batch through a started bearer, the destination answering
    `answers` in turn; the requests it got."""
    replies = iter(answers)
    with respx.mock(assert_all_mocked=False) as mock:
        mock.route(host="127.0.0.1").pass_through()
        route = mock.post(URL).mock(side_effect=lambda _request: next(replies))
        async with bearer.started(dest) as auth, httpx.AsyncClient() as client:
            deliverer = _deliverer(client, dest, kafka, auth)
            await deliverer.deliver(Batch([make_event(1)]))
    return [call.request for call in route.calls]


def _deliverer(
    client: httpx.AsyncClient, dest: Destination, kafka: FakeKafka, auth: Bearer | None
) -> Deliverer:
    """A deliverer with `[auth]` over respx's transport; Kafka a fake."""
    sender = HttpxSender(client, timeout_s=dest.request_timeout_s)
    return Deliverer(sender, dest, Diverter(kafka, dest), sleep=Sleeps(), auth=auth)


async def test_a_401_refreshes_the_token_and_resends_once(
    catalog_dir: Path, server: OAuth2Server
) -> None:
    """The request carries the bearer token; after a 401 one new token is fetched and the same
    request sent once more with it; the refresh is counted as unauthorized."""
    dest, kafka = _load(catalog_dir, "oauth-401", server), FakeKafka()
    requests = await _deliver(dest, [httpx.Response(401), httpx.Response(200)], kafka)
    first, second = server.issued
    assert [r.headers["authorization"] for r in requests] == [f"Bearer {first}", f"Bearer {second}"]
    assert requests[0].content == requests[1].content
    assert requests[0].headers["idempotency-key"] == requests[1].headers["idempotency-key"]
    assert _refreshes(dest.name, "unauthorized") == 1
    assert kafka.records == []


async def test_a_second_401_is_an_ordinary_refusal(catalog_dir: Path, server: OAuth2Server) -> None:
    """A 401 after the refresh is not resent again: the event is dead-lettered as a 4xx."""
    dest, kafka = _load(catalog_dir, "oauth-401-twice", server), FakeKafka()
    requests = await _deliver(dest, [httpx.Response(401), httpx.Response(401)], kafka)
    assert len(requests) == 2
    assert len(server.issued) == 2
    assert kafka.ids(dest.dlq_topic) == ["e1"]
    assert _refreshes(dest.name, "unauthorized") == 1


async def test_a_token_endpoint_failing_at_run_time_hands_off(
    catalog_dir: Path, server: OAuth2Server
) -> None:
    """When the refresh after a 401 is refused on every local attempt the events are handed to
    the retrier, not dead-lettered: the credential, not the events, is at fault."""
    dest, kafka = _load(catalog_dir, "oauth-refused", server), FakeKafka()
    replies = iter([httpx.Response(401)] * 2)
    with respx.mock(assert_all_mocked=False) as mock:
        mock.route(host="127.0.0.1").pass_through()
        mock.post(URL).mock(side_effect=lambda _request: next(replies))
        async with bearer.started(dest) as auth, httpx.AsyncClient() as client:
            server.refuse(400, 400)
            deliverer = _deliverer(client, dest, kafka, auth)
            await deliverer.deliver(Batch([make_event(1)]))
    assert kafka.ids(dest.retry_in_topic) == ["e1"]
    assert kafka.ids(dest.dlq_topic) == []
    assert "no OAuth2 token after a 401" in deliverer.recent_failures[-1]["error"]


async def test_start_fails_with_a_refused_token(catalog_dir: Path, server: OAuth2Server) -> None:
    """The first token is fetched at start: a refusal is a TokenRefused (exit 2) in one line."""
    dest = _load(catalog_dir, "oauth-start", server)
    server.refuse(401)
    with pytest.raises(TokenRefused) as info:
        async with bearer.started(dest):
            pass
    assert info.value.exit_code == 2
    assert server.token_url in str(info.value)


async def test_probe_fetches_a_token_and_names_a_refusal(
    catalog_dir: Path, server: OAuth2Server
) -> None:
    """`--probe`'s token line: ok with a token (never printed), refused (exit 2) naming the
    endpoint, unreachable (exit 1) for a failing one."""
    dest = _load(catalog_dir, "oauth-probe", server)
    report = CheckReport("connector")
    token = await probe_token(dest, report)
    assert token == server.issued[0]
    assert report.lines[-1].endswith("token received")
    assert all(token not in line and server.client_secret not in line for line in report.lines)
    server.refuse(400)
    assert await probe_token(dest, report) is None
    assert report.refused
    assert server.token_url in report.lines[-1]
