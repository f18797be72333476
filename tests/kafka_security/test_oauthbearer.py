"""SASL/OAUTHBEARER against Tansu started with --authentication, with a token endpoint on loopback.

This Tansu offers OAUTHBEARER but validates no token (it has no token validator configured), so
no login can succeed here (docs/kafka-security.md); what runs is the whole client side: the
settings, a token fetched from the endpoint by the client-credentials grant when the client
connects, the SASL exchange with the broker, and the refusal in one line naming the OAuth
client, exit 2, neither the client secret nor the token printed. A token endpoint that refuses
the client is named as such, before any broker is asked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from devstack.broker import LocalBroker
from devstack.destination import TestDestination
from hifi.kafka.settings import KafkaSettings
from tests.hifi.oauth2_server import OAuth2Server
from tests.kafka_security.support import probe

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    log = tmp_path_factory.mktemp("oauthbearer") / "tansu.log"
    with LocalBroker(authentication=True, log_path=log) as broker:
        yield broker


@pytest.fixture
async def token_server() -> AsyncIterator[OAuth2Server]:
    async with OAuth2Server() as server:
        yield server


def _settings(broker: LocalBroker, server: OAuth2Server, secret: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap=broker.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        oauth_token_url=server.token_url,
        oauth_client_id=server.client_id,
        oauth_client_secret=SecretStr(secret),
        oauth_scope="kafka",
    )


async def test_the_token_is_fetched_and_offered_to_the_broker(
    sasl_broker: LocalBroker,
    token_server: OAuth2Server,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
) -> None:
    settings = _settings(sasl_broker, token_server, token_server.client_secret)
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert token_server.issued, "no token was fetched"
    assert token_server.token_requests[0].form["scope"] == "kafka"
    assert code == 2
    assert "refused" in line
    assert f"OAuth client {token_server.client_id!r} (OAUTHBEARER)" in line
    assert token_server.client_secret not in line
    assert not [token for token in token_server.issued if token in line]


async def test_a_client_the_token_endpoint_refuses_is_named(
    sasl_broker: LocalBroker,
    token_server: OAuth2Server,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
) -> None:
    wrong = "wrong-" + token_server.client_secret
    settings = _settings(sasl_broker, token_server, wrong)
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert token_server.token_url in line
    assert wrong not in line
    assert not token_server.issued
