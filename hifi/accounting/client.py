"""A running auditor's tables over its ops port: `auditor report --url` and the retrier's dashboard."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec

from hifi.errors import ConfigError, HifiError
from hifi.redaction import short_error

HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class BreakerView:
    """A destination's circuit breaker as its connectors' breaker facts tell it
    (`auditor/breakers.py`): the worst state over its replicas, since when, the last error,
    and the tenant routes not closed."""

    state: str  # closed, half_open or open
    since_ms: int | None  # when it left closed; None while closed
    last_error: str | None
    replicas: int
    replicas_not_closed: int
    open_routes: int

    @classmethod
    def from_status(cls, found: Mapping[str, Any]) -> BreakerView:
        since = found["since_ms"]
        error = found["last_error"]
        return cls(
            str(found["state"]),
            None if since is None else int(since),
            None if error is None else str(error),
            int(found["replicas"]),
            int(found["replicas_not_closed"]),
            int(found["open_routes"]),
        )


@dataclass(frozen=True)
class DestinationHealth:
    """A destination's last 2xx and its failed batches and events lately, with the requests
    spent bisecting rejected batches, as the auditor's `/status` has them (`auditor/health.py`)."""

    last_delivered_ms: int | None
    window_s: int
    batches: int
    failed_batches: int
    failed_batch_share: float | None  # None without batches
    events: int
    failed_events: int
    failed_event_share: float | None  # None without events
    bisection_requests: int
    breaker: BreakerView | None = None  # None from an auditor before breaker facts

    @classmethod
    def from_status(cls, found: Mapping[str, Any]) -> DestinationHealth | None:
        """The `health` of one destination in `/status` (None from an auditor that counted
        requests, before batches and events); `TypeError`/`KeyError` if it is not one."""
        if "failed_events" not in found:
            return None
        last = found["last_delivered_ms"]
        breaker = found.get("breaker")
        return cls(
            None if last is None else int(last),
            int(found["window_s"]),
            int(found["batches"]),
            int(found["failed_batches"]),
            _share(found["failed_batch_share"]),
            int(found["events"]),
            int(found["failed_events"]),
            _share(found["failed_event_share"]),
            int(found["bisection_requests"]),
            None if breaker is None else BreakerView.from_status(breaker),
        )


def _share(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class AuditorTables:
    """One destination's per-minute rows (report format), the auditor's settled horizon, the
    destination's health (None from an auditor that does not give it) and the first minute the
    auditor counts (None from an auditor that does not say)."""

    rows: list[dict[str, Any]]
    final_before_ms: int | None
    settings: Mapping[str, Any]
    health: DestinationHealth | None = None
    counted_from_ms: int | None = None


def base_url(url: str, *, option: str = "--url") -> str:
    """`url` without its trailing slash; a `ConfigError` naming `option` unless it is http(s)."""
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ConfigError(f"{option} {url!r}: use the auditor's ops address, http://HOST:PORT")
    return base


async def fetch_tables(
    client: httpx.AsyncClient,
    base: str,
    dest: str,
    *,
    from_ms: int | None = None,
    to_ms: int | None = None,
) -> AuditorTables:
    """`/tables` and `/status` of the auditor at `base` for `dest`; one-line `HifiError`s for an
    unreachable auditor or an answer that is not an auditor's, a `ConfigError` for a
    destination it does not audit."""
    params = {"dest": dest}
    if from_ms is not None:
        params["from"] = str(from_ms)
    if to_ms is not None:
        params["to"] = str(to_ms)
    try:
        tables = await client.get(f"{base}/tables", params=params)
        status = await client.get(f"{base}/status")
    except httpx.HTTPError as exc:
        raise HifiError(f"{base}: {short_error(f'{type(exc).__name__}: {exc}')}") from None
    for response in (tables, status):
        if response.status_code != 200:
            raise HifiError(
                f"{base}: {response.request.url.path} answered HTTP {response.status_code};"
                " is this an auditor's ops address?"
            )
    try:
        found: Mapping[str, Any] = msgspec.json.decode(tables.content)
        state = msgspec.json.decode(status.content)["dests"]
        rows = list(found[dest]) if dest in found else None
        dest_state = state.get(dest, {})
        given = dest_state.get("health")
        health = None if given is None else DestinationHealth.from_status(given)
        counted_from = dest_state.get("counted_from_ms")
        counted_from_ms = None if counted_from is None else int(counted_from)
    except (msgspec.DecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise HifiError(f"{base}: the answer is not an auditor's tables") from None
    if rows is None:
        raise ConfigError(f"--dest {dest}: the auditor at {base} does not audit it")
    return AuditorTables(
        rows,
        dest_state.get("final_before_ms"),
        dest_state.get("settings", {}),
        health,
        counted_from_ms,
    )
