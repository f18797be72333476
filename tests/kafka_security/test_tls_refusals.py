"""A TLS set-up that cannot work is one line naming its cause, exit 2: `connector --check --probe`
against stunnel in front of Tansu with the wrong CA, a certificate for another name, or the
wrong protocol for the port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.destination import TestDestination
from devstack.tls import TlsKafka
from tests.kafka_security.support import other_ca_file, probe, started_tls

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    yield from started_tls(tmp_path_factory)


@pytest.fixture(scope="module")
def misnamed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    """A listener whose certificate names only kafka.example (clients connect to 127.0.0.1)."""
    yield from started_tls(tmp_path_factory, server_names=("kafka.example",))


async def test_a_ca_that_did_not_sign_the_broker_is_named(
    tls: TlsKafka, destination: TestDestination, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """A CA file that did not sign the broker's certificate: untrusted, the file named."""
    ca_file = other_ca_file(tmp_path)
    code, line = await probe(catalog_dir, unique, destination.url, tls.settings(ca_file=ca_file))
    assert code == 2
    assert "the broker's certificate is not trusted: not signed by the CA of" in line
    assert f"HIFI_KAFKA_CA_FILE ({ca_file})" in line


async def test_a_certificate_for_another_name_is_a_hostname_mismatch(
    misnamed: TlsKafka, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A trusted certificate that does not carry the address connected to: the mismatch named,
    with the way out (a name it carries, or HIFI_KAFKA_SSL_CHECK_HOSTNAME=false)."""
    code, line = await probe(catalog_dir, unique, destination.url, misnamed.settings())
    assert code == 2
    assert "the broker's certificate is not valid for '127.0.0.1'" in line
    assert "HIFI_KAFKA_SSL_CHECK_HOSTNAME=false" in line


async def test_hostname_checking_off_accepts_the_misnamed_certificate(
    misnamed: TlsKafka, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """With HIFI_KAFKA_SSL_CHECK_HOSTNAME=false the same certificate is accepted (signed by the CA)."""
    settings = misnamed.settings(ssl_check_hostname=False)
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 0, line
    assert line.endswith(f"kafka {misnamed.bootstrap}: reachable over SSL")


async def test_plaintext_against_the_tls_port_says_it_is_tls(
    tls: TlsKafka, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A PLAINTEXT client on the TLS port is told the port is a TLS listener."""
    settings = tls.settings(security_protocol="PLAINTEXT", ca_file=None)
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert (
        f"{tls.bootstrap} is a TLS listener: set HIFI_KAFKA_SECURITY_PROTOCOL=SSL (or SASL_SSL)"
        in line
    )


async def test_tls_against_the_plaintext_port_says_it_is_plaintext(
    tls: TlsKafka, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """An SSL client on the broker's own plaintext port (whose broker takes the ClientHello for
    the start of a request and waits for the rest) is told the port speaks plaintext Kafka."""
    settings = tls.settings(bootstrap=tls.plain_bootstrap)
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert f"{tls.plain_bootstrap} answers Kafka in plaintext, not TLS" in line
    assert "HIFI_KAFKA_SECURITY_PROTOCOL=PLAINTEXT or SASL_PLAINTEXT" in line
