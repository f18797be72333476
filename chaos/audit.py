"""The auditor's side of a chaos run: its per-minute tables against the run's own count by id."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

MINUTE_MS = 60_000
SETTLE_S = 5.0  # a minute is final this long after it ends; the run waits for its last minute
ACCOUNTING: dict[str, object] = {"settle_s": SETTLE_S, "retention_min": 60, "lag_sla_s": 30.0}
_POLL_S = 1.0


def minute_of(epoch_ms: int) -> int:
    return epoch_ms - epoch_ms % MINUTE_MS


@dataclass
class Expected:
    """One minute as the run saw it, by id."""

    entered: int = 0
    delivered: int = 0
    dead_lettered: int = 0


def expected_minutes(
    produced_ms: Mapping[str, int], delivered: Iterable[str], dead_lettered: Iterable[str]
) -> dict[int, Expected]:
    """Per minute: what was produced, received with a 2xx and dead-lettered (and not delivered).

    `produced_ms`: each produced key (an event id, or the origin of a record without one) and
    the time of the minute it belongs to: its event time, or its Kafka time when it has none.
    """
    delivered_ids = set(delivered) & produced_ms.keys()
    dead_ids = (set(dead_lettered) & produced_ms.keys()) - delivered_ids
    minutes: dict[int, Expected] = {}
    for key, at_ms in produced_ms.items():
        expected = minutes.setdefault(minute_of(at_ms), Expected())
        expected.entered += 1
        expected.delivered += key in delivered_ids
        expected.dead_lettered += key in dead_ids
    return minutes


@dataclass(frozen=True)
class AuditAccount:
    """The auditor's tables at the end of a run; every minute must match the run's own count."""

    minutes: int
    entered: int
    delivered: int
    dead_lettered: int
    in_retry: int
    missing: int
    provisional: int  # minutes with events that were not final yet
    mismatches: tuple[str, ...]  # "MINUTE figure auditor != run"
    # minute (epoch ms) -> its p95 lag in two parts, as the auditor tables a final minute: before
    # the connector took the events in, and the connector's own (`soak.model.LagParts`)
    lag_parts: Mapping[int, tuple[int | None, int | None]] = field(default_factory=dict)

    @classmethod
    def unread(cls, *why: str) -> AuditAccount:
        """An account of no rows read: `why` are its mismatches (none: nothing to read)."""
        return cls(0, 0, 0, 0, 0, 0, 0, why)

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.missing == 0 and self.in_retry == 0

    def line(self) -> str:
        return (
            f"audit: minutes={self.minutes} entered={self.entered} delivered={self.delivered}"
            f" dead_lettered={self.dead_lettered} in_retry={self.in_retry}"
            f" missing={self.missing} mismatched={len(self.mismatches)}"
            + (f" mismatch_sample={list(self.mismatches[:3])}" if self.mismatches else "")
        )


def check(rows: Sequence[Mapping[str, Any]], expected: Mapping[int, Expected]) -> AuditAccount:
    """Compare the auditor's rows (as `/tables` gives them) with the run's minutes."""
    found = {_minute_ms(row["minute"]): row for row in rows if row["entered"]}
    mismatches = []
    for minute in sorted({*found, *expected}):
        row, want = found.get(minute), expected.get(minute)
        name = datetime.fromtimestamp(minute / 1000, UTC).strftime("%H:%M")
        if row is None or want is None:
            mismatches.append(f"{name} only in {'the run' if row is None else 'the auditor'}")
            continue
        if not row["final"]:
            mismatches.append(f"{name} not final")
        for figure, value in (
            ("entered", want.entered),
            ("delivered", want.delivered),
            ("dead_lettered", want.dead_lettered),
            ("missing", 0),
            ("in_retry", 0),
        ):
            if row[figure] != value:
                mismatches.append(f"{name} {figure} {row[figure]} != {value}")
    final = [row for row in found.values() if row["final"]]
    return AuditAccount(
        minutes=len(final),
        entered=sum(row["entered"] for row in final),
        delivered=sum(row["delivered"] for row in final),
        dead_lettered=sum(row["dead_lettered"] for row in final),
        in_retry=sum(row["in_retry"] for row in found.values()),
        missing=sum(row["missing"] for row in found.values()),
        provisional=len(found) - len(final),
        mismatches=tuple(mismatches),
        lag_parts={
            minute: (row.get("lag_in_p95_ms"), row.get("process_p95_ms"))
            for minute, row in found.items()
            if row["final"]
        },
    )


async def account(
    url: str, dest: str, expected: Mapping[int, Expected], *, timeout_s: float
) -> AuditAccount:
    """Wait until the auditor at `url` agrees with the run, or `timeout_s`; its account then."""
    deadline = time.monotonic() + timeout_s
    result = AuditAccount.unread("the auditor never answered")
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            rows = await tables(client, url, dest)
            if rows is not None:
                result = check(rows, expected)
                if result.ok:
                    return result
            if time.monotonic() > deadline:
                return result
            await asyncio.sleep(_POLL_S)


async def tables(client: httpx.AsyncClient, url: str, dest: str) -> list[Any] | None:
    """An auditor's `/tables` rows of `dest`; None while it does not answer (restarting)."""
    try:
        response = await client.get(f"{url}/tables", params={"dest": dest})
    except httpx.HTTPError:
        return None  # restarting after a kill
    if response.status_code != 200:
        return None
    rows: list[Any] | None = response.json().get(dest)
    return rows


def _minute_ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
