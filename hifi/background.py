"""A task that lives as long as a block: started on entry, cancelled and awaited on exit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

__all__ = ["in_background"]


@contextlib.asynccontextmanager
async def in_background(
    work: Coroutine[Any, Any, None], *, name: str
) -> AsyncIterator[asyncio.Task[None]]:
    """Run `work` as a task named `name` while the block runs; on exit cancel it and wait for it
    to end. An exception the task ended with (other than its cancellation) is raised here."""
    task = asyncio.create_task(work, name=name)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
