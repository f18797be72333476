"""SASL/OAUTHBEARER's token provider against a real token endpoint on loopback.

No broker here serves OAUTHBEARER (docs/kafka-security.md): what aiokafka does with the token
is aiokafka's; this proves what hifi gives it (fetched, cached, refreshed ahead of expiry, a
refusal in one line, the secret and tokens masked).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiokafka.abc import AbstractTokenProvider

from hifi import redaction
from hifi.errors import ConfigError, TokenRefused
from hifi.kafka.clients import client_options
from hifi.kafka.oauthbearer import OAuthBearerTokens
from hifi.kafka.settings import KafkaSettings
from tests.hifi.oauth2_server import OAuth2Server


@pytest.fixture
async def server() -> AsyncIterator[OAuth2Server]:
    async with OAuth2Server() as running:
        yield running


def _settings(server: OAuth2Server, secret: str | None = None) -> KafkaSettings:
    return KafkaSettings.from_env(
        {
            "HIFI_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "HIFI_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "HIFI_KAFKA_OAUTH_TOKEN_URL": server.token_url,
            "HIFI_KAFKA_OAUTH_CLIENT_ID": server.client_id,
            "HIFI_KAFKA_OAUTH_CLIENT_SECRET": secret or server.client_secret,
            "HIFI_KAFKA_OAUTH_SCOPE": "kafka:produce kafka:consume",
        }
    )


async def test_token_is_fetched_with_its_scopes_and_reused(server: OAuth2Server) -> None:
    """The provider aiokafka gets fetches one token by the client-credentials grant, with the
    scopes, and answers later authentications from it; the client secret is masked."""
    provider = client_options(_settings(server))["sasl_oauth_token_provider"]
    assert isinstance(provider, AbstractTokenProvider)
    first = await provider.token()
    again = await asyncio.gather(*(provider.token() for _ in range(5)))
    assert first == server.issued[0]
    assert set(again) == {first}
    assert len(server.token_requests) == 1
    form = server.token_requests[0].form
    assert form["grant_type"] == "client_credentials"
    assert form["scope"] == "kafka:produce kafka:consume"
    assert (
        redaction.mask(f"secret {server.client_secret}, token {first}") == "secret ***, token ***"
    )


async def test_token_is_refreshed_before_it_expires(server: OAuth2Server) -> None:
    """A token announced for 2 s is replaced after half its life, before the broker would see it
    expire."""
    server.declared_expires_in = 2
    server.lifetime_s = 2
    provider = OAuthBearerTokens(_settings(server))
    first = await provider.token()
    await asyncio.sleep(1.2)  # the behaviour: past half the token's 2 s life
    second = await provider.token()
    assert second != first
    assert server.valid(second)
    assert len(server.issued) == 2


async def test_a_refused_client_is_one_line_exit_2_without_the_secret(
    server: OAuth2Server,
) -> None:
    wrong = "wrong-secret-" + server.client_secret
    provider = OAuthBearerTokens(_settings(server, secret=wrong))
    with pytest.raises(TokenRefused) as info:
        await provider.token()
    message = str(info.value)
    assert isinstance(info.value, ConfigError)
    assert info.value.exit_code == 2
    assert "\n" not in message
    assert server.token_url in message
    assert repr(server.client_id) in message
    assert wrong not in message
