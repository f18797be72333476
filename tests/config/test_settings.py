"""Process settings from HIFI_KAFKA_* environment variables."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from structlog.testing import capture_logs

from hifi import redaction
from hifi.errors import ConfigError
from hifi.kafka.clients import client_options
from hifi.kafka.settings import KafkaSettings


def test_defaults() -> None:
    """With nothing set hifi talks PLAINTEXT to 127.0.0.1:9092 without idempotence."""
    settings = KafkaSettings.from_env({})
    assert settings.bootstrap == "127.0.0.1:9092"
    assert client_options(settings) == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "PLAINTEXT",
    }
    assert settings.enable_idempotence is False


def test_sasl_settings_reach_every_client_and_stay_secret() -> None:
    """SASL credentials are passed to aiokafka while the password stays out of reprs."""
    settings = KafkaSettings.from_env(
        {
            "HIFI_KAFKA_BOOTSTRAP": "kafka-1:9093,kafka-2:9093",
            "HIFI_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "HIFI_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "HIFI_KAFKA_USERNAME": "hifi",
            "HIFI_KAFKA_PASSWORD": "pa55word-xyz",
        }
    )
    options = client_options(settings)
    assert options["sasl_plain_password"] == "pa55word-xyz"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert "pa55word-xyz" not in repr(settings)


def test_invalid_values_name_the_variable() -> None:
    """A bad protocol or incomplete SASL set-up names the environment variable."""
    with pytest.raises(ConfigError, match="HIFI_KAFKA_SECURITY_PROTOCOL"):
        KafkaSettings.from_env({"HIFI_KAFKA_SECURITY_PROTOCOL": "TLS"})
    with pytest.raises(ConfigError, match="HIFI_KAFKA_SASL_MECHANISM"):
        KafkaSettings.from_env({"HIFI_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    with pytest.raises(ConfigError, match="HIFI_KAFKA_CA_FILE"):
        KafkaSettings.from_env({"HIFI_KAFKA_CA_FILE": "/nonexistent/ca.pem"})
    with pytest.raises(ConfigError, match="HIFI_KAFKA_REPLICATION_FACTOR"):
        KafkaSettings.from_env({"HIFI_KAFKA_REPLICATION_FACTOR": "zero"})


def test_boolean_flags_are_validated() -> None:
    """A non-boolean HIFI_KAFKA_ENABLE_IDEMPOTENCE is named in the error."""
    with pytest.raises(ConfigError) as info:
        KafkaSettings.from_env(
            {"HIFI_KAFKA_PASSWORD": "p", "HIFI_KAFKA_ENABLE_IDEMPOTENCE": "maybe"}
        )
    assert "HIFI_KAFKA_ENABLE_IDEMPOTENCE" in str(info.value)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, str]:
    """A CA, a client certificate and its key (also encrypted), and a key of another pair."""
    ca = trustme.CA()
    client = ca.issue_cert("hifi-client")
    other = ca.issue_cert("someone-else")
    files = {
        "ca": tmp_path / "ca.pem",
        "cert": tmp_path / "client.pem",
        "key": tmp_path / "client.key",
        "other_key": tmp_path / "other.key",
        "encrypted_key": tmp_path / "client.enc.key",
        "not_pem": tmp_path / "not.pem",
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    client.cert_chain_pems[0].write_to_path(str(files["cert"]))
    client.private_key_pem.write_to_path(str(files["key"]))
    other.private_key_pem.write_to_path(str(files["other_key"]))
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    files["encrypted_key"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"key-pass-123"),
        )
    )
    files["not_pem"].write_text("hello\n")
    return {name: str(path) for name, path in files.items()}


def _tls(pki: dict[str, str], **extra: str) -> dict[str, str]:
    return {
        "HIFI_KAFKA_SECURITY_PROTOCOL": "SSL",
        "HIFI_KAFKA_CA_FILE": pki["ca"],
        "HIFI_KAFKA_CERT_FILE": pki["cert"],
        "HIFI_KAFKA_KEY_FILE": pki["key"],
        **extra,
    }


def test_mutual_tls_files_are_loaded_when_read(pki: dict[str, str]) -> None:
    """A certificate and key that belong together, an encrypted key with its password: read;
    the start-up line names the files and never the key password."""
    settings = KafkaSettings.from_env(_tls(pki))
    assert settings.describe()["client_certificate"] == pki["cert"]
    encrypted = KafkaSettings.from_env(
        _tls(pki, HIFI_KAFKA_KEY_FILE=pki["encrypted_key"], HIFI_KAFKA_KEY_PASSWORD="key-pass-123")
    )
    assert "key-pass-123" not in repr(encrypted)
    assert "key-pass-123" not in str(encrypted.describe())
    assert redaction.mask("the key-pass-123 leaked") == "the *** leaked"


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"HIFI_KAFKA_KEY_FILE": "{other_key}"}, "does not belong to the certificate"),
        ({"HIFI_KAFKA_KEY_FILE": "{encrypted_key}"}, "is encrypted; set HIFI_KAFKA_KEY_PASSWORD"),
        (
            {"HIFI_KAFKA_KEY_FILE": "{encrypted_key}", "HIFI_KAFKA_KEY_PASSWORD": "wrong-pass-9"},
            "HIFI_KAFKA_KEY_PASSWORD: does not decrypt",
        ),
        ({"HIFI_KAFKA_CERT_FILE": "/nonexistent/c.pem"}, "HIFI_KAFKA_CERT_FILE: /nonexistent"),
        ({"HIFI_KAFKA_CA_FILE": "{not_pem}"}, "HIFI_KAFKA_CA_FILE"),
        ({"HIFI_KAFKA_CERT_FILE": "{not_pem}", "HIFI_KAFKA_KEY_FILE": ""}, "HIFI_KAFKA_CERT_FILE"),
        ({"HIFI_KAFKA_CERT_FILE": ""}, "HIFI_KAFKA_KEY_FILE needs HIFI_KAFKA_CERT_FILE"),
        ({"HIFI_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}, "does not use TLS"),
    ],
)
def test_unusable_tls_settings_name_the_variable(
    pki: dict[str, str], changes: dict[str, str], named: str
) -> None:
    env = _tls(pki, **{key: value.format(**pki) for key, value in changes.items()})
    with pytest.raises(ConfigError, match=named) as info:
        KafkaSettings.from_env(env)
    assert "\n" not in str(info.value)
    assert "wrong-pass-9" not in str(info.value)


def test_hostname_verification_is_turned_off_only_explicitly_and_said(
    pki: dict[str, str],
) -> None:
    with capture_logs() as logs:
        assert KafkaSettings.from_env(_tls(pki)).ssl_check_hostname is True
        assert not logs
        off = KafkaSettings.from_env(_tls(pki, HIFI_KAFKA_SSL_CHECK_HOSTNAME="false"))
    assert off.ssl_check_hostname is False
    assert [entry["event"] for entry in logs] == ["kafka_tls_hostname_unchecked"]
    assert logs[0]["log_level"] == "warning"
    with pytest.raises(ConfigError, match="HIFI_KAFKA_SSL_CHECK_HOSTNAME"):
        KafkaSettings.from_env(_tls(pki, HIFI_KAFKA_SSL_CHECK_HOSTNAME="perhaps"))


def test_sasl_needs_its_mechanism_and_credentials() -> None:
    """OAUTHBEARER needs the token endpoint and client; the others a user and a password; a
    mechanism without a SASL protocol is a mistake, not ignored."""
    oauth = {
        "HIFI_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "HIFI_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
        "HIFI_KAFKA_OAUTH_TOKEN_URL": "https://idp.example/oauth2/token",
        "HIFI_KAFKA_OAUTH_CLIENT_ID": "hifi",
        "HIFI_KAFKA_OAUTH_CLIENT_SECRET": "oauth-secret-77",
        "HIFI_KAFKA_OAUTH_SCOPE": "kafka",
    }
    settings = KafkaSettings.from_env(oauth)
    assert settings.describe()["oauth_client_id"] == "hifi"
    assert "oauth-secret-77" not in repr(settings) + str(settings.describe())
    without = {k: v for k, v in oauth.items() if k != "HIFI_KAFKA_OAUTH_CLIENT_SECRET"}
    with pytest.raises(ConfigError, match="needs HIFI_KAFKA_OAUTH_CLIENT_SECRET"):
        KafkaSettings.from_env(without)
    with pytest.raises(ConfigError, match="HIFI_KAFKA_OAUTH_TOKEN_URL"):
        KafkaSettings.from_env({**oauth, "HIFI_KAFKA_OAUTH_TOKEN_URL": "idp.example/token"})
    with pytest.raises(ConfigError, match="needs HIFI_KAFKA_USERNAME, HIFI_KAFKA_PASSWORD"):
        KafkaSettings.from_env({**oauth, "HIFI_KAFKA_SASL_MECHANISM": "PLAIN"})
    with pytest.raises(ConfigError, match="HIFI_KAFKA_SECURITY_PROTOCOL=SASL_SSL or"):
        KafkaSettings.from_env({"HIFI_KAFKA_SASL_MECHANISM": "PLAIN"})


def test_environment_gives_back_what_was_read(pki: dict[str, str]) -> None:
    """`environment()` is what a child process needs to connect the same way."""
    env = _tls(
        pki,
        HIFI_KAFKA_BOOTSTRAP="127.0.0.1:19093",
        HIFI_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
        HIFI_KAFKA_SASL_MECHANISM="SCRAM-SHA-256",
        HIFI_KAFKA_USERNAME="hifi",
        HIFI_KAFKA_PASSWORD="pw-abc-123",
        HIFI_KAFKA_SSL_CHECK_HOSTNAME="false",
    )
    settings = KafkaSettings.from_env(env)
    assert settings.environment() == env
    assert KafkaSettings.from_env(settings.environment()) == settings
