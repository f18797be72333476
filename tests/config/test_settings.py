"""Process settings from HIFI_KAFKA_* environment variables."""

from __future__ import annotations

import pytest

from hifi.errors import ConfigError
from hifi.kafka import client_options
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
