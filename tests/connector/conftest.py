"""Fixtures of the connector's proxy tests: a tinyproxy of their own (with and without Basic
auth), and an HTTPS destination behind it, from a throw-away CA. The HTTP/1.1 transport's tests
run on both event loops: asyncio's, and uvloop, which the daemons run on (`hifi.event_loop`)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Mapping

import pytest
import trustme

from devstack.destination import TestDestination
from devstack.proxy import TinyProxy, tinyproxy_missing
from tests.connector.proxy_support import PASSWORD, USER

# the modules that drive connector.http1 in this process: what a daemon does on uvloop
_ON_BOTH_LOOPS = frozenset(
    {
        "test_eyeballs.py",
        "test_http1.py",
        "test_http1_edges.py",
        "test_http1_failures.py",
        "test_http1_proxy.py",
        "test_http1_tls_edges.py",
        "test_http1_via_proxy.py",
        "test_tls_destination.py",
    }
)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name not in _ON_BOTH_LOOPS:
        return {"asyncio": asyncio.new_event_loop}
    import uvloop

    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="module")
def tinyproxy() -> Iterator[TinyProxy]:
    if why := tinyproxy_missing():
        pytest.skip(why)
    with TinyProxy() as proxy:
        yield proxy


@pytest.fixture(scope="module")
def auth_tinyproxy() -> Iterator[TinyProxy]:
    if why := tinyproxy_missing():
        pytest.skip(why)
    with TinyProxy(auth=(USER, PASSWORD)) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def https_server(ca: trustme.CA) -> AsyncIterator[TestDestination]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    async with TestDestination(ssl_context=context) as server:
        yield server
