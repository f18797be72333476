"""Deliveries through a real proxy (Debian's tinyproxy): an https destination through a CONNECT
tunnel, an http one in absolute form, NO_PROXY, and a proxy's refusal, each through the
connector's own transport and `Deliverer`, as `connector --dest` sends."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.http1.addresses import ForbiddenAddress
from connector.http_client import destination_transport, http_client
from connector.rebatch import Batch
from connector.sender import opened_sender
from devstack.destination import TestDestination
from devstack.proxy import TinyProxy
from tests.connector.proxy_support import needs_tinyproxy
from tests.helpers import FakeKafka, make_destination, make_event

pytestmark = needs_tinyproxy


@pytest.fixture(autouse=True)
def _no_env_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def _deliver(dest_dir: Path, url: str, kafka: FakeKafka, **keys: object) -> Deliverer:
    dest = make_destination(dest_dir, "viaproxy", url, "src", local_retry_attempts=2, **keys)
    async with opened_sender(dest) as sender:
        deliverer = Deliverer(sender, dest, Diverter(kafka, dest))
        await deliverer.deliver(Batch([make_event(i) for i in range(3)]))
    return deliverer


async def test_an_https_server_through_the_catalogs_proxy(
    auth_tinyproxy: TinyProxy, https_server: TestDestination, ca: trustme.CA, tmp_path: Path
) -> None:
    """A CONNECT tunnel with Proxy-Authorization, TLS end to end with the destination."""
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    kafka = FakeKafka()
    before = len(auth_tinyproxy.requests())
    await _deliver(
        tmp_path, https_server.url, kafka, proxy=auth_tinyproxy.url(), tls_ca_file="ca.pem"
    )
    assert https_server.delivered_ids() == ["e0", "e1", "e2"]
    assert kafka.ids("viaproxy.retry_in") == []
    assert auth_tinyproxy.requests()[before:] == [f"CONNECT 127.0.0.1:{https_server.port} HTTP/1.1"]


async def test_an_http_destination_through_http_proxy_in_absolute_form(
    auth_tinyproxy: TinyProxy,
    destination: TestDestination,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", auth_tinyproxy.url())
    before = len(auth_tinyproxy.requests())
    await _deliver(tmp_path, destination.url, FakeKafka())
    assert destination.delivered_ids() == ["e0", "e1", "e2"]
    assert auth_tinyproxy.requests()[before:] == [f"POST {destination.url} HTTP/1.1"]


async def test_no_proxy_sends_directly(
    auth_tinyproxy: TinyProxy,
    destination: TestDestination,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", auth_tinyproxy.url())
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.0/8")
    before = len(auth_tinyproxy.requests())
    await _deliver(tmp_path, destination.url, FakeKafka())
    assert destination.delivered_ids() == ["e0", "e1", "e2"]
    assert auth_tinyproxy.requests()[before:] == []


async def test_a_proxys_refusal_is_unreachable_never_a_dead_letter(
    auth_tinyproxy: TinyProxy, https_server: TestDestination, ca: trustme.CA, tmp_path: Path
) -> None:
    """Wrong proxy credentials: handed to the retrier (the breaker counts each attempt), the
    error naming the proxy without its password; nothing dead-lettered, nothing delivered."""
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    kafka = FakeKafka()
    wrong = auth_tinyproxy.url(password="not-the-password-123")
    deliverer = await _deliver(tmp_path, https_server.url, kafka, proxy=wrong, tls_ca_file="ca.pem")
    assert https_server.delivered_ids() == []
    assert kafka.ids("viaproxy.dlq") == []
    assert kafka.ids("viaproxy.retry_in") == ["e0", "e1", "e2"]
    (failure,) = deliverer.recent_failures
    assert "proxy" in failure["error"]
    assert "not-the-password-123" not in failure["error"]
    assert deliverer.breakers.of(None).failures == 2  # one per attempt: nothing reached it


async def test_a_tenants_private_address_is_refused_through_a_proxy_too(
    auth_tinyproxy: TinyProxy, destination: TestDestination, tmp_path: Path
) -> None:
    """The name is resolved and checked by hifi before any CONNECT or request to the proxy."""
    dest = make_destination(
        tmp_path, "viaproxy", destination.url, "src", proxy=auth_tinyproxy.url()
    )
    before = len(auth_tinyproxy.requests())
    async with http_client(dest, destination_transport(dest)) as client:
        with pytest.raises(ForbiddenAddress):
            await client.post(destination.url, content=b"[]", extensions={"hifi.public_only": True})
    assert auth_tinyproxy.requests()[before:] == []
    assert destination.delivered_ids() == []
