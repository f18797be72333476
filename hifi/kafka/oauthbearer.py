"""SASL/OAUTHBEARER for the Kafka clients: aiokafka asks its token provider for a token each
time it authenticates a connection; `OAuthBearerTokens` answers from `hifi.oauth2.TokenSource`
(the client-credentials grant, refreshed ahead of expiry, one fetch at a time, the token and the
client secret masked), the module the destinations' `[auth]` uses too.

The source's HTTP client is opened for a fetch and closed after it (a cached token costs no
request), so a provider needs no stop of its own; each Kafka client gets its own provider.
A refused client is `TokenRefused` (a `ConfigError`, exit 2) naming the token_url and client_id.
"""

from __future__ import annotations

import asyncio
import ssl

from aiokafka.abc import AbstractTokenProvider

from hifi.errors import ConfigError
from hifi.kafka.settings import KafkaSettings
from hifi.oauth2 import ClientCredentials, TokenSource

__all__ = ["OAuthBearerTokens"]


class OAuthBearerTokens(AbstractTokenProvider):  # type: ignore[misc]
    """aiokafka's token provider for SASL/OAUTHBEARER, from the client-credentials grant."""

    def __init__(self, settings: KafkaSettings, *, ssl_context: ssl.SSLContext | None = None):
        url, client, secret = (
            settings.oauth_token_url,
            settings.oauth_client_id,
            settings.oauth_client_secret,
        )
        if not (url and client and secret):  # KafkaSettings validates this; for the type checker
            raise ConfigError("kafka OAUTHBEARER needs a token url, a client id and a secret")
        self.source = TokenSource(
            ClientCredentials(
                token_url=url,
                client_id=client,
                client_secret=secret.get_secret_value(),
                scopes=tuple((settings.oauth_scope or "").split()),
            ),
            ssl_context=ssl_context,
        )
        self._lock: asyncio.Lock | None = None

    async def token(self) -> str:
        """A token not due for refresh: the cached one, or one fetched now (`TokenRefused`,
        a `ConfigError`, when the endpoint refuses the client; `TokenUnavailable` else)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock, self.source:
            return await self.source.token()
