"""A request's timeouts: each phase's (httpx's, or one value for all), and the loop time by which
the whole must end."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

__all__ = ["Timeouts"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    """httpx's timeouts of a request (each phase's), and the loop time by which it must end
    (`hifi.total_timeout_s`; None: no such bound)."""

    connect_s: float | None
    write_s: float | None
    read_s: float | None
    pool_s: float | None
    deadline_s: float | None

    @classmethod
    def of(cls, extensions: dict[str, Any]) -> Timeouts:
        phases = extensions.get("timeout") or {}
        total_s = extensions.get("hifi.total_timeout_s")
        deadline_s = None if total_s is None else asyncio.get_running_loop().time() + total_s
        return cls(
            phases.get("connect"),
            phases.get("write"),
            phases.get("read"),
            phases.get("pool"),
            deadline_s,
        )

    @classmethod
    def within_s(cls, timeout_s: float) -> Timeouts:
        """Every phase `timeout_s`, and the whole by then."""
        deadline_s = asyncio.get_running_loop().time() + timeout_s
        return cls(timeout_s, timeout_s, timeout_s, timeout_s, deadline_s)

    def within(self, timeout_s: float | None) -> float | None:
        """`timeout_s`, at most what is left before the deadline."""
        if self.deadline_s is None:
            return timeout_s
        left_s = max(0.0, self.deadline_s - asyncio.get_running_loop().time())
        return left_s if timeout_s is None else min(timeout_s, left_s)
