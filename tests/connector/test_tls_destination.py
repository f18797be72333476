"""The connector's HTTP client against a loopback HTTPS destination signed by a private CA: the
catalog's TLS keys decide whether it is trusted and whether a client certificate is presented."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from config.destination import Destination
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.rebatch import Batch
from connector.sender import opened_sender
from devstack.destination import TestDestination
from tests.helpers import FakeKafka, Sleeps, make_destination, make_event


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def pki(tmp_path: Path, ca: trustme.CA) -> Path:
    """ca.pem (the private CA), client.pem and client.key (a client certificate it signed)."""
    tls = tmp_path / "tls"
    tls.mkdir()
    ca.cert_pem.write_to_path(tls / "ca.pem")
    client = ca.issue_cert("client.hifi.test")
    for index, blob in enumerate(client.cert_chain_pems):
        blob.write_to_path(tls / "client.pem", append=index > 0)
    client.private_key_pem.write_to_path(tls / "client.key")
    return tls


def _server_context(
    ca: trustme.CA,
    *,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    client_cert: bool = False,
) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*hosts).configure_cert(context)
    if client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        ca.configure_trust(context)
    return context


@pytest.fixture
async def https_destination(ca: trustme.CA) -> AsyncIterator[TestDestination]:
    async with TestDestination(ssl_context=_server_context(ca)) as dest:
        yield dest


@pytest.fixture
async def mtls_destination(ca: trustme.CA) -> AsyncIterator[TestDestination]:
    """An HTTPS destination that completes the handshake only with a client certificate of the CA."""
    async with TestDestination(ssl_context=_server_context(ca, client_cert=True)) as dest:
        yield dest


async def _deliver(
    catalog_dir: Path, name: str, url: str, **tls: Any
) -> tuple[Destination, FakeKafka]:
    """Deliver events e1 and e2 once through `http_client` and a `Deliverer`; Kafka is a fake."""
    dest = make_destination(
        catalog_dir, name, url, "src", local_retry_attempts=2, request_timeout_s=5.0, **tls
    )
    kafka = FakeKafka()
    async with opened_sender(dest) as sender:
        await Deliverer(sender, dest, Diverter(kafka, dest), sleep=Sleeps()).deliver(
            Batch([make_event(1), make_event(2)])
        )
    return dest, kafka


async def test_private_ca_is_trusted_with_tls_ca_file(
    catalog_dir: Path, pki: Path, https_destination: TestDestination, unique: str
) -> None:
    """With tls_ca_file naming the private CA, the batch is delivered over HTTPS."""
    assert https_destination.url.startswith("https://127.0.0.1:")
    _, kafka = await _deliver(
        catalog_dir, unique, https_destination.url, tls_ca_file=str(pki / "ca.pem")
    )
    assert https_destination.delivered_ids() == ["e1", "e2"]
    assert kafka.records == []


async def test_private_ca_is_not_trusted_without_tls_ca_file(
    catalog_dir: Path, https_destination: TestDestination, unique: str
) -> None:
    """Without tls_ca_file the private CA is unknown: the destination is unavailable, events handed off."""
    dest, kafka = await _deliver(catalog_dir, unique, https_destination.url)
    assert https_destination.delivered_ids() == []
    assert https_destination.request_count == 0
    assert kafka.ids(dest.retry_in_topic) == ["e1", "e2"]


async def test_hostname_is_verified(
    catalog_dir: Path, pki: Path, ca: trustme.CA, unique: str
) -> None:
    """A certificate of the trusted CA for another host name is refused: hostnames are verified."""
    async with TestDestination(ssl_context=_server_context(ca, hosts=("other.test",))) as server:
        dest, kafka = await _deliver(
            catalog_dir, unique, server.url, tls_ca_file=str(pki / "ca.pem")
        )
        assert server.delivered_ids() == []
    assert kafka.ids(dest.retry_in_topic) == ["e1", "e2"]


async def test_client_certificate_is_presented_when_configured(
    catalog_dir: Path, pki: Path, mtls_destination: TestDestination, unique: str
) -> None:
    """A server that requires a client certificate gets the batch only with tls_client_cert and tls_client_key."""
    dest, kafka = await _deliver(
        catalog_dir, f"{unique}-anon", mtls_destination.url, tls_ca_file=str(pki / "ca.pem")
    )
    assert mtls_destination.delivered_ids() == []
    assert kafka.ids(dest.retry_in_topic) == ["e1", "e2"]

    _, kafka = await _deliver(
        catalog_dir,
        f"{unique}-cert",
        mtls_destination.url,
        tls_ca_file=str(pki / "ca.pem"),
        tls_client_cert=str(pki / "client.pem"),
        tls_client_key=str(pki / "client.key"),
    )
    assert mtls_destination.delivered_ids() == ["e1", "e2"]
    assert kafka.records == []
