"""The pause before a local retry: Retry-After when sent (bounded), else jittered exponential."""

from __future__ import annotations

import random

from config.destination import Destination
from connector.backoff import BACKOFF_BASE_S, pause_s
from hifi.errors import DestinationUnavailable

DEST = Destination(
    name="d",
    url="http://127.0.0.1:1/",
    source_topics=["t"],
    local_retry_max_backoff_s=0.5,
    retry_after_max_s=30,
)


def test_retry_after_is_honoured_up_to_its_bound() -> None:
    asked = DestinationUnavailable("503", status=503, retry_after_s=7.0)
    assert pause_s(DEST, asked, failed_attempts=1) == 7.0
    greedy = DestinationUnavailable("429", status=429, retry_after_s=3600.0)
    assert pause_s(DEST, greedy, failed_attempts=1) == 30


def test_backoff_doubles_with_full_jitter_up_to_its_cap() -> None:
    """Uniform in [0, base * 2^(n-1)], the upper end capped at local_retry_max_backoff_s."""
    error = DestinationUnavailable("timeout")
    rng = random.Random(7)
    for failed, high in ((1, BACKOFF_BASE_S), (2, 2 * BACKOFF_BASE_S), (3, 0.4), (9, 0.5)):
        pauses = [pause_s(DEST, error, failed_attempts=failed, uniform=rng) for _ in range(400)]
        assert 0.0 <= min(pauses) < high * 0.1
        assert high * 0.9 < max(pauses) <= high
