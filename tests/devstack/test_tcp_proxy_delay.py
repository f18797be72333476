"""The TCP proxy's delay: every chunk arrives, in order, no sooner than `delay_ms` after it was sent."""

from __future__ import annotations

import asyncio
import time

import pytest

from devstack.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


async def test_a_delayed_link_adds_its_delay_each_way_and_keeps_the_bytes() -> None:
    """An echo through a proxy of 50 ms each way takes at least 100 ms and returns every byte."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with TcpProxy("127.0.0.1", port, delay_ms=50) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            payload = bytes(range(256)) * 4096  # 1 MiB, many chunks
            started = time.monotonic()
            writer.write(payload)
            await writer.drain()
            received = await reader.readexactly(len(payload))
            elapsed_s = time.monotonic() - started
            writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert received == payload
    assert elapsed_s >= 0.1
