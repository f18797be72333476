"""Fixtures of the ingest tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.redis import RedisServer


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """A private redis-server (never the machine's shared one): a test may stop it."""
    with RedisServer() as server:
        yield server
