"""The HTTP/1.1 transport's in-process tests, run again on uvloop: the loop the connector runs on
(`hifi.event_loop`) differs from asyncio's in what it promises (its transports are not
`asyncio.Transport` subclasses; its connection, TLS and name-resolution paths are its own)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULES = [
    "test_eyeballs.py",
    "test_http1.py",
    "test_http1_edges.py",
    "test_http1_failures.py",
    "test_http1_proxy.py",
    "test_http1_tls_edges.py",
    "test_http1_via_proxy.py",
    "test_tls_destination.py",
]

# The OAuth2 token fetches through tinyproxy stay on asyncio's loop: their token endpoint (the
# tests' aiohttp server) leaves a libuv handle behind, and uvloop's close of the session's loop
# waits for it for ever. The connector's token fetches on uvloop are the e2e tests' (processes).
DESELECTED = "test_http1_proxy.py::TestTokensThroughTinyproxy"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_transports_tests_pass_on_uvloop() -> None:
    here = Path(__file__).parent.relative_to(REPO_ROOT)
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "tests.uvloop_plugin"),
            *("-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0"),
            *(str(here / module) for module in MODULES),
            *("--deselect", str(here / DESELECTED)),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    tail = run.stdout[-4000:]
    assert run.returncode == 0, tail
    assert re.search(r"^event loops made: [1-9]\d* \(uvloop\)$", run.stdout, re.M), tail
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed, tail
    assert int(passed.group(1)) >= 100, tail
