"""Waiting for hifi daemons to answer `/readyz` (joined their group, partitions assigned)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

import httpx

_POLL_S = 0.2


async def until_ready(ports: Iterable[int], timeout_s: float) -> bool:
    """True once the ops server on each of `ports` (loopback) answers `/readyz` with 200;
    False if `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0) as client:
        for port in ports:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        break
                if time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(_POLL_S)
    return True
