"""The connector's real HTTP client against a real loopback server: what a failure without a reply
is counted as, and that it is retried on a fresh connection."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from config.destination import Destination
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.http_client import http_client
from connector.rebatch import Batch
from connector.sender import opened_sender
from devstack.destination import Reply, TestDestination
from devstack.ports import free_port
from tests.connector.loopback_http import RawServer, answer
from tests.helpers import FakeKafka, Sleeps, make_destination, make_event


def _requests(dest: Destination, status_class: str) -> float:
    labels = {"dest": dest.name, "status_class": status_class}
    return REGISTRY.get_sample_value("hifi_connector_requests_total", labels) or 0.0


def _dest(catalog_dir: Path, name: str, url: str) -> Destination:
    return make_destination(
        catalog_dir, name, url, "src", local_retry_attempts=3, request_timeout_s=0.5
    )


async def test_dropped_connection_and_slow_reply_are_retried_then_delivered(
    catalog_dir: Path, destination: TestDestination, unique: str
) -> None:
    """A connection closed without a reply counts as `connection`, a late reply as `timeout`."""
    dest = _dest(catalog_dir, unique, destination.url)
    destination.script(Reply(drop=True), Reply(200, delay_s=2.0))
    kafka, sleeps = FakeKafka(), Sleeps()
    async with opened_sender(dest) as sender:
        await Deliverer(sender, dest, Diverter(kafka, dest), sleep=sleeps).deliver(
            Batch([make_event(1), make_event(2)])
        )
    assert destination.delivered_ids() == ["e1", "e2"]
    assert kafka.records == []
    assert len(sleeps.calls) == 2
    assert (_requests(dest, "connection"), _requests(dest, "timeout")) == (1.0, 1.0)
    assert _requests(dest, "2xx") == 1.0


async def test_refused_connections_hand_the_batch_to_the_retrier(
    catalog_dir: Path, unique: str
) -> None:
    """Nobody listening: every attempt fails as `connection` and the events go to retry_in."""
    dest = _dest(catalog_dir, unique, f"http://127.0.0.1:{free_port()}/v1")
    kafka, sleeps = FakeKafka(), Sleeps()
    async with opened_sender(dest) as sender:
        await Deliverer(sender, dest, Diverter(kafka, dest), sleep=sleeps).deliver(
            Batch([make_event(1)])
        )
    assert kafka.ids(dest.retry_in_topic) == ["e1"]
    assert _requests(dest, "connection") == 3.0
    assert _requests(dest, "timeout") == 0.0


async def test_cookies_a_destination_sets_are_not_sent_back(catalog_dir: Path, unique: str) -> None:
    """The connector keeps no session: a `Set-Cookie` in a reply is not returned with the next
    request."""
    reply = b"HTTP/1.1 200 OK\r\nSet-Cookie: lb=node-2; Path=/\r\nContent-Length: 2\r\n\r\nok"
    async with RawServer(answer([reply])) as server:
        dest = _dest(catalog_dir, unique, server.url)
        async with http_client(dest) as client:
            first = await client.post(server.url, content=b"[]")
            await client.post(server.url, content=b"[]")
    assert first.headers["set-cookie"] == "lb=node-2; Path=/"
    assert [b"cookie:" in head.lower() for head in server.heads] == [False, False]
