"""The loss and lag of every minute, and the destination's health, for the page, from a
running auditor (`--auditor-url`).

The page polls every few seconds; the auditor is asked at most once per `refresh_s` per
destination, and an auditor that is down or slow costs the page one line, never the retrier.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.client import (
    AuditorTables,
    BreakerView,
    DestinationHealth,
    base_url,
    fetch_tables,
)
from hifi.accounting.tables import day_availability, parse_minute, verdict
from hifi.errors import HifiError

HOURS_SHOWN = 3
_TIMEOUT_S = 3.0
_REFRESH_S = 2.0
FAILED_EVENT_SHARE_ALARM = 0.05  # a share of failed events above this shows red


@dataclass
class AuditorFeed:
    """Per-minute rows of the last `HOURS_SHOWN` hours, today's availability and the
    destination's health (its last 2xx, its failed batches and events lately), cached briefly."""

    base: str
    refresh_s: float = _REFRESH_S
    _cache: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def at(cls, url: str | None) -> AuditorFeed | None:
        """The feed of the auditor at `url` (`--auditor-url`/`HIFI_AUDITOR_URL`); None without."""
        return cls(base_url(url, option="--auditor-url")) if url else None

    async def minutes(self, dest: str, *, now_ms: int) -> dict[str, Any]:
        cached = self._cache.get(dest)
        if cached is not None and time.monotonic() - cached[0] < self.refresh_s:
            return cached[1]
        answer = await self._ask(dest, now_ms)
        self._cache[dest] = (time.monotonic(), answer)
        return answer

    async def _ask(self, dest: str, now_ms: int) -> dict[str, Any]:
        day_start_ms = now_ms - now_ms % (24 * 3600 * 1000)
        from_ms = min(day_start_ms, now_ms - HOURS_SHOWN * 3600 * 1000)
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT_S) as client:
                found = await fetch_tables(client, self.base, dest, from_ms=from_ms)
        except HifiError as exc:
            return {"available": False, "why": f"auditor {exc}"}
        try:
            return self._shown(found, now_ms=now_ms)
        except (KeyError, ValueError, TypeError, AttributeError):
            return {"available": False, "why": f"auditor {self.base}: rows it answered do not read"}

    @staticmethod
    def _shown(found: AuditorTables, *, now_ms: int) -> dict[str, Any]:
        """The rows of the last `HOURS_SHOWN` hours before `now_ms`, each with its verdict as
        its counts read now (an older auditor may still say `loss` of a minute whose missing
        events turned up late), and today's availability up to the minute of `now_ms`."""
        shown_from = now_ms - HOURS_SHOWN * 3600 * 1000
        shown_from -= shown_from % MINUTE_MS
        today = datetime.fromtimestamp(now_ms / 1000, tz=UTC).date()
        return {
            "available": True,
            "final_before_ms": found.final_before_ms,
            "lag_sla_s": found.settings.get("lag_sla_s"),
            "rows": [
                _judged_now(row) for row in found.rows if parse_minute(row["minute"]) >= shown_from
            ],
            "availability": day_availability(
                found.rows,
                today,
                final_before_ms=found.final_before_ms,
                counted_from_ms=found.counted_from_ms,
                now_ms=now_ms,
            ),
            "health": None if found.health is None else panel_health(found.health),
        }


def _judged_now(row: dict[str, Any]) -> dict[str, Any]:
    up, down_reason = verdict(row)
    return row | {"up": up, "down_reason": down_reason}


def panel_health(health: DestinationHealth) -> dict[str, Any]:
    """The health panel's figures; `alarm`: the share of failed events shows red; `breaker`:
    the circuit breaker's line (None while closed, or from an auditor that does not say)."""
    share = health.failed_event_share
    breaker = health.breaker
    now_ms = int(time.time() * 1000)
    return asdict(health) | {
        "alarm": share is not None and share > FAILED_EVENT_SHARE_ALARM,
        "breaker": None if breaker is None else panel_breaker(breaker, now_ms),
    }


def panel_breaker(breaker: BreakerView, now_ms: int) -> dict[str, Any] | None:
    """The breaker's line, "open since 04:12 UTC (3 min): HTTP 401 ..." (red when open), with
    the tenant routes not closed; None when it and every route are closed."""
    if breaker.state == "closed" and not breaker.open_routes:
        return None
    parts = []
    if breaker.state != "closed":
        state = breaker.state.replace("_", "-")
        if breaker.since_ms is not None:
            since = datetime.fromtimestamp(breaker.since_ms / 1000, tz=UTC).strftime("%H:%M")
            minutes = max(0, now_ms - breaker.since_ms) // 60_000
            state += f" since {since} UTC ({minutes} min)"
        if breaker.replicas > 1:
            state += f" on {breaker.replicas_not_closed} of {breaker.replicas} replicas"
        parts.append(state + (f": {breaker.last_error}" if breaker.last_error else ""))
    if breaker.open_routes:
        routes = "route" if breaker.open_routes == 1 else "routes"
        parts.append(f"{breaker.open_routes} tenant {routes} not closed")
    return {
        **asdict(breaker),
        "text": "; ".join(parts),
        "alarm": breaker.state == "open",
    }
