"""A lookup cache's background loops: a failed step is logged and the loop goes on; a crash is surfaced."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import structlog

from hifi.redaction import short_error

log = structlog.get_logger(__name__)

T = TypeVar("T")


class BackgroundLoops:
    """What one cache's loops (full loads, reloads of queued keys) do when something fails."""

    def __init__(self, dest: str, cache: str) -> None:
        self.dest, self.cache = dest, cache

    async def guarded(self, step: Awaitable[T]) -> T | None:
        """Run one step of a background loop; an error other than the source's (a bug) is
        logged and the loop goes on: the cache must keep serving and trying."""
        try:
            return await step
        except Exception as exc:  # a background loop outlives any one failure
            log.error(
                "lookup_step_failed",
                dest=self.dest,
                cache=self.cache,
                error=short_error(f"{type(exc).__name__}: {exc}"),
            )
            return None

    def ended(self, task: asyncio.Task[None]) -> None:
        """Surface a background task that ended other than by cancellation (a bug)."""
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "lookup_task_crashed",
                dest=self.dest,
                cache=self.cache,
                task=task.get_name(),
                error=short_error(repr(task.exception())),
            )
