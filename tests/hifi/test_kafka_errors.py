"""`kafka_errors()`: what aiokafka raises becomes one hifi error naming the cause and who."""

from __future__ import annotations

import ssl

import pytest
from aiokafka import errors as aiokafka_errors

from hifi.errors import BrokerAuthFailed, BrokerRefused, BrokerUnavailable, UnknownTopic
from hifi.kafka.clients import kafka_errors
from hifi.kafka.settings import KafkaSettings

SCRAM = KafkaSettings(
    bootstrap="kafka:9096",
    security_protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    username="hifi",
    password="pw-never-shown",  # type: ignore[arg-type]
)


@pytest.mark.parametrize(
    ("raised", "error", "says"),
    [
        (
            aiokafka_errors.SaslAuthenticationFailed("bad credentials"),
            BrokerAuthFailed,
            "refused: authentication failed for user 'hifi' (SCRAM-SHA-512)",
        ),
        (
            aiokafka_errors.UnsupportedSaslMechanismError("offers PLAIN"),
            BrokerAuthFailed,
            "SASL mechanism SCRAM-SHA-512 is not enabled on the broker",
        ),
        (aiokafka_errors.TopicAuthorizationFailedError(), BrokerAuthFailed, "refused:"),
        (ssl.SSLError(1, "bad"), BrokerAuthFailed, "TLS failed"),
        (aiokafka_errors.UnknownTopicOrPartitionError(), UnknownTopic, "unknown topic"),
        (aiokafka_errors.KafkaConnectionError("gone"), BrokerUnavailable, "gone"),
        (aiokafka_errors.InvalidTopicError(), BrokerRefused, "InvalidTopic"),
    ],
)
def test_translation_names_the_cause(raised: Exception, error: type[Exception], says: str) -> None:
    with pytest.raises(error) as info, kafka_errors(SCRAM, "start consumer"):
        raise raised
    message = str(info.value)
    assert message.startswith("kafka kafka:9096: start consumer: ")
    assert says in message
    assert "pw-never-shown" not in message
    assert "\n" not in message


def test_oauthbearer_refusal_names_the_client() -> None:
    settings = KafkaSettings(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        oauth_token_url="https://idp.example/token",
        oauth_client_id="hifi-prod",
        oauth_client_secret="never-shown",  # type: ignore[arg-type]
    )
    with (
        pytest.raises(BrokerAuthFailed, match="OAuth client 'hifi-prod'"),
        kafka_errors(settings, "start producer"),
    ):
        raise aiokafka_errors.SaslAuthenticationFailed("token expired")
