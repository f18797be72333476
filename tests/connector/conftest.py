"""Fixtures of the connector's proxy tests: a tinyproxy of their own (with and without Basic
auth), and an HTTPS destination behind it, from a throw-away CA."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator

import pytest
import trustme

from devstack.destination import TestDestination
from devstack.proxy import TinyProxy, tinyproxy_missing
from tests.connector.proxy_support import PASSWORD, USER


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
