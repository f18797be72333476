"""How long a request that failed waits before its next local attempt.

A `Retry-After` the destination sent is honoured up to `retry_after_max_s`; otherwise the wait
is exponential backoff with full jitter: uniform between 0 and `base * 2 ** (attempts - 1)`,
capped at `local_retry_max_backoff_s` (what tenacity's `wait_random_exponential` computes).
"""

from __future__ import annotations

import random

from config.destination import Destination
from hifi.errors import DestinationUnavailable

BACKOFF_BASE_S = 0.1


def pause_s(
    dest: Destination,
    error: BaseException | None,
    *,
    failed_attempts: int,
    uniform: random.Random | None = None,
) -> float:
    """The pause after `failed_attempts` attempts, the last of which failed with `error`."""
    if isinstance(error, DestinationUnavailable) and error.retry_after_s is not None:
        return min(error.retry_after_s, dest.retry_after_max_s)
    high = min(dest.local_retry_max_backoff_s, BACKOFF_BASE_S * 2 ** (failed_attempts - 1))
    return (uniform or _RANDOM).uniform(0.0, max(0.0, high))


_RANDOM = random.Random()
