"""What the proxy tests share: the credentials of their tinyproxy and the marks of a test that
needs it (the fixtures are in `tests/connector/conftest.py`)."""

from __future__ import annotations

import pytest

from devstack.proxy import tinyproxy_missing

PASSWORD = "pr0xy-Pa55-never-shown"
USER = "alice"

needs_tinyproxy = [
    pytest.mark.integration,
    pytest.mark.skipif(tinyproxy_missing() is not None, reason=tinyproxy_missing() or ""),
]
