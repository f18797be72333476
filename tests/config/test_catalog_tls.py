"""TLS keys of a catalog file: paths resolved beside the file, files checked at load, one-line errors."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from config.catalog import Catalog
from hifi.errors import ConfigError
from tests.helpers import write_destination

HTTPS = {"url": "https://collector.test/v1/events", "source_topics": ["events"]}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def pki(catalog_dir: Path, ca: trustme.CA) -> Path:
    """A `tls/` directory beside the catalog files: ca.pem, client.pem, client.key, both.pem."""
    tls = catalog_dir / "tls"
    tls.mkdir()
    client = ca.issue_cert("client.hifi.test")
    ca.cert_pem.write_to_path(tls / "ca.pem")
    for index, blob in enumerate(client.cert_chain_pems):
        blob.write_to_path(tls / "client.pem", append=index > 0)
    client.private_key_pem.write_to_path(tls / "client.key")
    client.private_key_and_cert_chain_pem.write_to_path(tls / "both.pem")
    (tls / "junk.pem").write_text("not a certificate\n")
    other = ca.issue_cert("other.hifi.test")
    other.private_key_pem.write_to_path(tls / "other.key")
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )
    (tls / "encrypted.key").write_bytes(encrypted)
    return tls


def _error(catalog_dir: Path, **keys: object) -> str:
    write_destination(catalog_dir, "d", **{**HTTPS, **keys})
    with pytest.raises(ConfigError) as info:
        Catalog(catalog_dir, {}).load("d")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{catalog_dir / 'd.toml'}: ")
    return message


def test_without_tls_keys_there_is_no_context(catalog_dir: Path) -> None:
    """A destination without TLS keys has no context of its own: the client's default trust applies."""
    write_destination(catalog_dir, "d", **HTTPS)
    dest = Catalog(catalog_dir, {}).load("d")
    assert dest.ssl_context() is None
    assert (dest.tls_ca_file, dest.tls_client_cert, dest.tls_client_key) == (None, None, None)


def test_relative_paths_are_resolved_beside_the_catalog_file(catalog_dir: Path, pki: Path) -> None:
    """Relative TLS paths are read from the catalog file's directory, not the working directory."""
    write_destination(
        catalog_dir,
        "d",
        **HTTPS,
        tls_ca_file="tls/ca.pem",
        tls_client_cert="tls/client.pem",
        tls_client_key="tls/client.key",
    )
    dest = Catalog(catalog_dir, {}).load("d")
    assert dest.tls_ca_file == pki / "ca.pem"
    assert dest.tls_client_cert == pki / "client.pem"
    assert dest.tls_client_key == pki / "client.key"


def test_ssl_context_trusts_the_ca_and_verifies_hostnames(catalog_dir: Path, pki: Path) -> None:
    """ssl_context() trusts the CA bundle of tls_ca_file and still verifies certificates and hostnames."""
    write_destination(catalog_dir, "d", **HTTPS, tls_ca_file=str(pki / "ca.pem"))
    context = Catalog(catalog_dir, {}).load("d").ssl_context()
    assert context is not None
    assert context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert len(context.get_ca_certs()) == 1


def test_client_key_may_be_inside_the_certificate_file(catalog_dir: Path, pki: Path) -> None:
    """tls_client_cert alone is enough when its file holds the private key too."""
    write_destination(catalog_dir, "d", **HTTPS, tls_client_cert="tls/both.pem")
    dest = Catalog(catalog_dir, {}).load("d")
    assert dest.tls_client_key is None
    assert dest.ssl_context() is not None


@pytest.mark.parametrize(
    ("keys", "key", "fragments"),
    [
        ({"tls_ca_file": "tls/missing.pem"}, "tls_ca_file", ["missing.pem does not exist"]),
        ({"tls_ca_file": "tls"}, "tls_ca_file", ["is not a file"]),
        ({"tls_ca_file": "tls/junk.pem"}, "tls_ca_file", ["junk.pem", "no certificate"]),
        ({"tls_ca_file": ""}, "tls_ca_file", ["path of a PEM file"]),
        ({"tls_ca_file": 5}, "tls_ca_file", ["path of a PEM file", "(got 5)"]),
        (
            {"tls_client_cert": "tls/client.pem"},
            "tls_client_cert",
            ["client.pem holds no private key", "set tls_client_key"],
        ),
        (
            {"tls_client_key": "tls/client.key"},
            "tls_client_key",
            ["set without tls_client_cert"],
        ),
        (
            {"tls_client_cert": "tls/junk.pem", "tls_client_key": "tls/client.key"},
            "tls_client_cert",
            ["junk.pem holds no PEM certificate"],
        ),
        (
            {"tls_client_cert": "tls/client.pem", "tls_client_key": "tls/junk.pem"},
            "tls_client_key",
            ["junk.pem holds no PEM private key"],
        ),
        (
            {"tls_client_cert": "tls/client.pem", "tls_client_key": "tls/other.key"},
            "tls_client_key",
            ["other.key does not match the certificate", "client.pem"],
        ),
        (
            {"tls_client_cert": "tls/client.pem", "tls_client_key": "tls/encrypted.key"},
            "tls_client_key",
            ["encrypted.key is encrypted", "unencrypted"],
        ),
        (
            {"tls_client_cert": "tls/client.pem", "tls_client_key": "tls/nope.key"},
            "tls_client_key",
            ["nope.key does not exist"],
        ),
    ],
)
def test_bad_tls_files_are_refused_at_load(
    catalog_dir: Path, pki: Path, keys: dict[str, object], key: str, fragments: list[str]
) -> None:
    """A TLS file that is missing, or that Python's ssl cannot load, is one line naming the key and the cause."""
    message = _error(catalog_dir, **keys)
    assert f"key '{key}'" in message
    for fragment in fragments:
        assert fragment in message


def test_http_url_with_tls_keys_is_refused(catalog_dir: Path, pki: Path) -> None:
    """TLS keys on an http:// destination are a configuration error, not silently unused."""
    message = _error(catalog_dir, url="http://collector.test/v1", tls_ca_file="tls/ca.pem")
    assert "key 'url'" in message
    assert "https://" in message
    assert "tls_ca_file" in message


def test_decode_takes_its_own_tls_files_relative_to_the_catalog(
    catalog_dir: Path, pki: Path
) -> None:
    """`[decode]`'s CA and client certificate reach the registry client; a key that does not
    match its certificate is one line naming the key."""
    head = 'url = "https://c.test/"\nsource_topics = ["t"]\n[decode]\nkind = "schema_registry"\n'
    (catalog_dir / "d.toml").write_text(
        head + 'url = "https://registry.test"\ntls_ca_file = "tls/ca.pem"\n'
        'tls_client_cert = "tls/client.pem"\ntls_client_key = "tls/client.key"\n'
    )
    dest = Catalog(catalog_dir, {}).load("d")
    assert dest.decode is not None
    conf = dest.decode.registry(None).client_conf()
    assert conf["ssl.ca.location"] == str(pki / "ca.pem")
    assert (conf["ssl.certificate.location"], conf["ssl.key.location"]) == (
        str(pki / "client.pem"),
        str(pki / "client.key"),
    )
    (catalog_dir / "d.toml").write_text(
        head + 'url = "https://registry.test"\ntls_client_cert = "tls/client.pem"\n'
        'tls_client_key = "tls/other.key"\n'
    )
    with pytest.raises(ConfigError) as info:
        Catalog(catalog_dir, {}).load("d")
    assert "\n" not in str(info.value)
    assert "tls_client_key" in str(info.value)
