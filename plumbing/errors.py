"""The one exception tree of hifi; library exceptions are translated into it at the boundary.

    HifiError
    ├── ConfigError               bad catalog file, flag or environment; CLIs exit 2 with one line
    ├── TransientError            may succeed if tried again later
    │   ├── DestinationUnavailable    timeout, connection error, 5xx, 429 (carries Retry-After)
    │   └── BrokerUnavailable         Kafka produce or commit failed after the client's own retries
    └── PermanentError            will fail the same way however often it is tried
        ├── DestinationRejected       4xx other than 429, or a redirect that is not followed
        └── MalformedRecord           a Kafka record that cannot be delivered (not JSON, too large)

Code above the boundaries (connector.delivery for httpx, plumbing.kafka for aiokafka) only ever
catches these types.
"""

from __future__ import annotations


class HifiError(Exception):
    """Base of every error hifi raises on purpose."""


class ConfigError(HifiError):
    """Invalid configuration; the message names the file or variable, the key and what is allowed."""


class TransientError(HifiError):
    """A failure that may go away when the same operation is retried later."""


class PermanentError(HifiError):
    """A failure that retrying cannot fix; the item goes to the dead-letter queue."""

    reason: str = "permanent"


class DestinationUnavailable(TransientError):
    """The destination did not accept a request for a reason worth retrying."""

    def __init__(
        self, message: str, *, status: int = 0, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class BrokerUnavailable(TransientError):
    """Kafka could not be reached or refused a write; nothing was acknowledged."""


class DestinationRejected(PermanentError):
    """The destination refused a request (4xx other than 429, or an unfollowed redirect)."""

    def __init__(self, message: str, *, status: int, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class MalformedRecord(PermanentError):
    """A Kafka record that can never be delivered as it is."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
