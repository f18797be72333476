"""The one exception tree of hifi; library exceptions are translated into it at the boundary.

    HifiError                     exit code 1 (the subclasses keep it unless they say otherwise)
    ├── ConfigError               bad catalog file, flag or environment; exit code 2
    │   ├── BrokerAuthFailed          Kafka refused the credentials, the TLS handshake or a permission
    │   └── TokenRefused              an OAuth2 token endpoint refused the client credentials
    ├── CommandFailed             a command stopped before it finished what it was asked to do
    ├── GroupActive               a consumer group has members; its offsets move only once they stop
    ├── RequestRefused            ingest answers a request as a whole, producing none of it (4xx, 503)
    ├── TransientError            may succeed if tried again later
    │   ├── DestinationUnavailable    timeout, connection error, 5xx, 429 (carries Retry-After)
    │   ├── BrokerUnavailable         Kafka unreachable, timed out, or a write or commit failed
    │   ├── StoreUnavailable          Redis unreachable, timed out, failing over, or refusing
    │   ├── TokenUnavailable          an OAuth2 token endpoint unreachable, timed out, 5xx or 429
    │   └── RegistryUnavailable       a Schema Registry unreachable, timed out, 5xx or refusing
    └── PermanentError            will fail the same way however often it is tried
        ├── DestinationRejected       4xx other than 429, or a redirect that is not followed
        ├── MalformedRecord           a Kafka record that cannot be delivered (not JSON, too large)
        ├── ReplayRecordRefused       a record of NAME.dlq_replays this reader cannot use
        ├── EntryRefused              a lookup entry that cannot be used (not JSON, wrong types)
        └── BrokerRefused             Kafka refused a request for good (unknown topic, codec, version)
            └── UnknownTopic

Every class carries the exit code a command ends with when it escapes (`HifiError.exit_code`,
as click's `ClickException.exit_code`): 2 for `ConfigError` and its subclasses (the input is
wrong: a service manager should not restart), 1 for everything else (unreachable, refused,
failed: worth another try). `hifi.cli.run_command` turns one into a line on stderr and that code.

The boundaries: `connector.delivery` and `hifi.oauth2` for httpx, `hifi.kafka` for aiokafka,
`hifi.schema_registry` for confluent-kafka's registry client,
`hifi.lookup_cache.redis_hash` for redis (`hifi.redis_keys` goes through its `redis_command`).
Code above them only ever catches these types. A
`status` is a real HTTP status or None (no reply); the reason a record was dead-lettered is a
`hifi.vocabulary.Reason`, never a status.
"""

from __future__ import annotations

from hifi.vocabulary import Reason


class HifiError(Exception):
    """Base of every error hifi raises on purpose."""

    #: what a command exits with when this error ends it: 1, a failure worth another try
    exit_code: int = 1


class ConfigError(HifiError):
    """Invalid configuration; the message names the file or variable, the key and what is allowed."""

    #: 2, bad configuration or usage: the same command fails the same way until the input changes
    exit_code = 2


class CommandFailed(HifiError):
    """A command stopped before it finished what it was asked to do (interrupted, or a job
    failed); the message says how far it got and how to resume."""


class GroupActive(HifiError):
    """A consumer group still has members, so its committed offsets must not be moved now."""


class TransientError(HifiError):
    """A failure that may go away when the same operation is retried later."""


class PermanentError(HifiError):
    """A failure that retrying cannot fix."""


class DestinationUnavailable(TransientError):
    """The destination did not accept a request for a reason worth retrying."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status  #: the HTTP status, or None when no reply came
        self.retry_after_s = retry_after_s


class BrokerUnavailable(TransientError):
    """Kafka could not be reached, timed out, or refused a write or commit; nothing was acknowledged."""


class BrokerAuthFailed(ConfigError):
    """Kafka refused the SASL credentials, the TLS handshake or an ACL: fix HIFI_KAFKA_*."""


class BrokerRefused(PermanentError):
    """Kafka answered, but refuses this request whatever the retry."""


class UnknownTopic(BrokerRefused):
    """The topic does not exist (and the broker does not create it)."""


class DestinationRejected(PermanentError):
    """The destination refused a request (4xx other than 429, or an unfollowed redirect)."""

    def __init__(self, message: str, *, status: int | None, reason: Reason) -> None:
        super().__init__(message)
        self.status = status  #: the HTTP status, or None (too many redirects: no final reply)
        self.reason = reason


class MalformedRecord(PermanentError):
    """A Kafka record that can never be delivered as it is."""

    def __init__(self, message: str, *, reason: Reason) -> None:
        super().__init__(message)
        self.reason = reason


class ReplayRecordRefused(PermanentError):
    """A record of NAME.dlq_replays that cannot be read as a replay record; `why` says which
    kind (a `retrier.replays.Unusable` value: undecodable, newer_major)."""

    def __init__(self, message: str, *, why: str) -> None:
        super().__init__(message)
        self.why = why


class StoreUnavailable(TransientError):
    """Redis could not be reached, timed out, or refused a command; nothing was read or written."""


class EntryRefused(PermanentError):
    """A lookup entry that cannot be used as it is (not JSON, wrong types, a value missing); the
    message says why without quoting the entry (it may hold secrets)."""


class TokenRefused(ConfigError):
    """An OAuth2 token endpoint answered 4xx, or 2xx without a bearer token: the client_id,
    client_secret, scopes, audience or token_url are wrong (`hifi.oauth2`)."""


class TokenUnavailable(TransientError):
    """An OAuth2 token endpoint gave no token for a reason worth retrying: no answer, a timeout,
    5xx or 429 (`hifi.oauth2`)."""


class RegistryUnavailable(TransientError):
    """A Schema Registry gave no schema for a reason worth waiting out: no answer, a timeout, a
    5xx, a refused credential (`hifi.schema_registry`): a source fault, not the records'."""


class RequestRefused(HifiError):
    """The ingest service answers a request as a whole and produces none of it: `status` is
    what it answers (a 4xx: auth, limits, an unreadable body; 503 when it has no room), `limit`
    the stream setting it is over (a 413), `headers` extra response headers (`Allow`, ...)."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        limit: str | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.limit = limit
        self.headers = headers
