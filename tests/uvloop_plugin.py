"""A pytest plugin: every async test of the session runs on uvloop, the loop the daemons run on
(`hifi.event_loop`). `tests/connector/test_http1_on_uvloop.py` runs the HTTP/1.1 transport's
in-process tests with it (`-p tests.uvloop_plugin`); the rest of the suite runs on asyncio's
loop, and the daemons the tests start as processes on uvloop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

_made: list[asyncio.AbstractEventLoop] = []


def _uvloop() -> asyncio.AbstractEventLoop:
    loop = uvloop.new_event_loop()
    _made.append(loop)
    return loop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"uvloop": _uvloop}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    kinds = sorted({type(loop).__module__ for loop in _made})
    terminalreporter.write_line(f"event loops made: {len(_made)} ({', '.join(kinds)})")
