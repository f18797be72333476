"""Mutual TLS through stunnel (verify = 2): the connector delivers with the client certificate;
without one, or with one the broker's CA did not sign, `--check --probe` says so in one line,
exit 2, and a key password never shows."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from devstack.destination import TestDestination
from devstack.kafka_tools import produce_events
from devstack.tls import TlsKafka
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.helpers import events, make_destination, start_daemon, wait_exit
from tests.kafka_security.support import KEY_PASSWORD, probe, run_cli, started_tls

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    yield from started_tls(tmp_path_factory, mutual=True)


def _encrypted_client(directory: Path, password: str) -> tuple[str, str]:
    """A client certificate from a CA the broker does not trust, its key encrypted with
    `password`: (certificate file, key file)."""
    issued = trustme.CA().issue_cert("intruder")
    cert_file, key_file = directory / "intruder.pem", directory / "intruder.key"
    issued.cert_chain_pems[0].write_to_path(str(cert_file))
    key = serialization.load_pem_private_key(issued.private_key_pem.bytes(), password=None)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password.encode()),
        )
    )
    return str(cert_file), str(key_file)


async def test_the_connector_delivers_with_its_client_certificate(
    tls: TlsKafka,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """The connector, a real process given the client certificate, delivers every event."""
    settings = tls.settings()
    await kafka_admin.ensure_topics(settings, [unique], partitions=1)
    sent = events(20)
    await produce_events(settings, unique, sent)
    make_destination(catalog_dir, unique, destination.url, unique)
    args = ["--dest", unique, "--catalog", str(catalog_dir), "--metrics-port", "0"]
    log = tmp_path / "connector.log"
    connector = start_daemon(
        "connector", [*args, "--until-idle", "2"], kafka=settings, log_path=log
    )
    processes.append(connector)
    assert await wait_exit(connector, 90) == 0, log.read_text()[-2000:]
    assert sorted(destination.delivered_ids()) == sorted(e["id"] for e in sent)


async def test_without_a_client_certificate_the_check_names_it(
    tls: TlsKafka, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """No client certificate: the broker requires one, and the line names the variables."""
    settings = tls.settings(cert_file=None, key_file=None)
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert f"{tls.bootstrap}: the broker requires a client certificate (mutual TLS" in line
    assert "set HIFI_KAFKA_CERT_FILE and HIFI_KAFKA_KEY_FILE" in line


async def test_a_certificate_of_another_ca_is_refused_and_its_key_password_never_shown(
    tls: TlsKafka, destination: TestDestination, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """A client certificate the broker's CA did not sign (its key encrypted): refused, the
    certificate named, the key password nowhere in the output."""
    cert_file, key_file = _encrypted_client(tmp_path, KEY_PASSWORD)
    settings = tls.settings(cert_file=cert_file, key_file=key_file, key_password=KEY_PASSWORD)
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert f"the broker refused the client certificate {cert_file}" in line


async def test_a_key_password_that_does_not_decrypt_is_one_line_never_shown(
    tls: TlsKafka, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """A key password that does not decrypt the key: one line, exit 2, neither password printed."""
    cert_file, key_file = _encrypted_client(tmp_path, KEY_PASSWORD)
    wrong = "wrong-" + KEY_PASSWORD
    settings = tls.settings(cert_file=cert_file, key_file=key_file, key_password=wrong)
    code, out, err = await _check(catalog_dir, unique, settings)
    assert code == 2
    assert err.count("\n") == 1, err
    assert KEY_PASSWORD not in out + err
    assert wrong not in out + err


@pytest.mark.parametrize("given", ["wrong", "missing"])
async def test_a_key_password_that_is_wrong_or_missing_is_named(
    tls: TlsKafka, catalog_dir: Path, unique: str, tmp_path: Path, given: str
) -> None:
    """An encrypted key with a wrong password, or none: the line names HIFI_KAFKA_KEY_PASSWORD."""
    cert_file, key_file = _encrypted_client(tmp_path, KEY_PASSWORD)
    password = "wrong-" + KEY_PASSWORD if given == "wrong" else None
    settings = tls.settings(cert_file=cert_file, key_file=key_file, key_password=password)
    code, _, err = await _check(catalog_dir, unique, settings)
    assert (code, err.count("\n")) == (2, 1), err
    assert "HIFI_KAFKA_KEY_PASSWORD" in err
    assert key_file in err


async def _check(catalog_dir: Path, name: str, settings: KafkaSettings) -> tuple[int, str, str]:
    """`connector --check` (the settings read, nothing reached) with `settings`."""
    make_destination(catalog_dir, name, "https://nowhere.invalid/", name)
    return await run_cli(
        "connector", "--dest", name, "--catalog", str(catalog_dir), "--check", settings=settings
    )
