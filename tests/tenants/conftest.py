"""A private redis-server per test: its own port, stopped (or killed) and started again at will."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.redis import RedisServer


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """Never the machine's shared Redis: a test may kill this one mid-run."""
    with RedisServer() as server:
        yield server
