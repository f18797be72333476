"""The quick tier's guard refuses services and processes, and allows what the test itself serves."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys

import pytest

from tests.tiers import QuickTierGuard, QuickTierViolation


class _Item:
    """Just enough of a pytest item for `QuickTierGuard.active`: no marks, so quick tier."""

    def get_closest_marker(self, name: str) -> None:
        return None


def _closed_port() -> int:
    """A loopback port this process bound only before the guard was installed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_connection_to_a_port_this_process_does_not_serve_fails_even_if_caught() -> None:
    """Reaching a service (here any loopback port the test does not serve) fails the test, even
    when the code under test swallows the error."""
    port = _closed_port()
    guard = QuickTierGuard()
    guard.install()
    try:
        refused = pytest.raises(QuickTierViolation, match=f"127.0.0.1:{port}")
        swallowed = contextlib.suppress(QuickTierViolation)  # as the code under test might
        with refused, guard.active(_Item()), socket.socket() as sock, swallowed:  # type: ignore[arg-type]
            sock.connect(("127.0.0.1", port))
    finally:
        guard.uninstall()


def test_a_child_process_fails_the_test() -> None:
    """Starting a process in a quick-tier test fails it."""
    guard = QuickTierGuard()
    guard.install()
    try:
        with pytest.raises(QuickTierViolation, match="process"), guard.active(_Item()):  # type: ignore[arg-type]
            subprocess.run([sys.executable, "-c", "pass"], check=False)
    finally:
        guard.uninstall()


async def test_a_server_the_test_starts_on_loopback_is_allowed() -> None:
    """A server this process listens on (a test destination, an ops page) may be reached."""
    guard = QuickTierGuard()
    guard.install()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hi")
        await writer.drain()
        writer.close()

    try:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with guard.active(_Item()):  # type: ignore[arg-type]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await reader.read() == b"hi"
            writer.close()
        server.close()
        await server.wait_closed()
    finally:
        guard.uninstall()
    assert guard.violations == []
