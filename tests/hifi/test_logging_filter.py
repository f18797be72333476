"""asyncio's report of a connection error nobody retrieved (aiokafka leaves them) is not printed."""

from __future__ import annotations

import asyncio
import gc
import ssl

import pytest

from hifi.logging import configure_logging


def _unretrieved(error: BaseException) -> None:
    """A future that failed with `error` and is collected unretrieved: asyncio logs it."""
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        future.set_exception(error)
        del future
        gc.collect()
    finally:
        loop.close()


def test_connection_errors_left_unretrieved_are_not_printed(
    capfd: pytest.CaptureFixture[str],
) -> None:
    configure_logging("json", "INFO")
    _unretrieved(ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] certificate required"))
    _unretrieved(ConnectionResetError(104, "Connection reset by peer"))
    assert "never retrieved" not in capfd.readouterr().err
    _unretrieved(ValueError("a bug, not a connection"))
    printed = capfd.readouterr().err
    assert "Future exception was never retrieved" in printed
    assert "ValueError" in printed
