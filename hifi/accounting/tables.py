"""The per-minute loss table and the daily availability, as JSON rows and as terminal tables.

One row format serves the running auditor's `/tables`, the archive's `minutes` files and
`auditor report`: `minute` (ISO 8601 UTC), the counts, the lag percentiles, `final` and `up`.

Late is not lost: a final minute down for `loss` whose `missing` is back to 0 is down for
`late`, and counts with the minutes down for lag. The auditor writes that verdict into its rows
(`hifi/accounting/late.py`); a row read out (`report_row`, `day_availability`) goes through `verdict`
only for the rows an auditor before that wrote.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from rich.table import Table

from hifi.accounting.buckets import MINUTE_MS, Bucket
from hifi.accounting.late import LATE as LATE  # re-exported: readers of rows name it from here
from hifi.accounting.late import LOSS
from hifi.accounting.ledger import Ledger

DAY_MINUTES = 1440


def iso_minute(minute_ms: int) -> str:
    return datetime.fromtimestamp(minute_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:00Z")


def archive_row(ledger: Ledger, bucket: Bucket, *, written_ms: int) -> dict[str, Any]:
    """A bucket as a row of the archive's `minutes` files (see docs/accounting.md)."""
    counts, lags = ledger.tally(bucket), ledger.lags(bucket)
    return {
        "minute_ms": bucket.minute_ms,
        "entered": counts.entered,
        "accepted": counts.accepted,
        "delivered": counts.delivered,
        "dead_lettered": counts.dead_lettered,
        "dead_lettered_by_reason": dict(counts.dead_lettered_by_reason),
        "filtered": counts.filtered,
        "in_retry": counts.in_retry,
        "waiting": counts.waiting,
        "missing": counts.missing,
        "duplicates": bucket.duplicates,
        "lag_p50_ms": lags.p50_ms,
        "lag_p95_ms": lags.p95_ms,
        "lag_p99_ms": lags.p99_ms,
        "lag_in_p95_ms": lags.lag_in_p95_ms,
        "process_p95_ms": lags.process_p95_ms,
        "final": bucket.final,
        "up": bucket.up,
        "down_reason": bucket.down_reason,
        "written_ms": written_ms,
        "missing_ids": list(bucket.missing_ids or ()),
    }


def report_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """An archive row as `auditor report --format json` and `/tables` give it (an older
    auditor's row with its verdict as its counts read now: `verdict`)."""
    up, down_reason = verdict(row)
    return {
        "minute": iso_minute(int(row["minute_ms"])),
        "entered": row["entered"],
        "accepted": row.get("accepted", 0),
        "delivered": row["delivered"],
        "dead_lettered": row["dead_lettered"],
        "dead_lettered_by_reason": dict(row["dead_lettered_by_reason"] or {}),
        "filtered": row["filtered"],
        "in_retry": row["in_retry"],
        "waiting": row.get("waiting", 0),
        "missing": row["missing"],
        "duplicates": row["duplicates"],
        "lag_p50_ms": row["lag_p50_ms"],
        "lag_p95_ms": row["lag_p95_ms"],
        "lag_p99_ms": row["lag_p99_ms"],
        "lag_in_p95_ms": row.get("lag_in_p95_ms"),
        "process_p95_ms": row.get("process_p95_ms"),
        "final": bool(row["final"]),
        "up": up,
        "down_reason": down_reason,
        "missing_ids": list(row.get("missing_ids") or ()),
    }


def verdict(row: Mapping[str, Any]) -> tuple[bool | None, str | None]:
    """A row's `up` and `down_reason` as its counts read now, for the rows of an older auditor.

    The auditor judges a minute when it becomes final and again down for `loss` when events go
    missing after, and (since it writes `late` itself: `hifi/accounting/late.py`) down for `late` when
    a later outcome moves them all out of `missing` (a late fact, the group's offset moved
    back); its rows need nothing here. An auditor before that kept `loss` beside `missing 0`:
    late is not lost, so such a final row reads down for `late` (its events were delivered
    after the minute settled, as the lag rule counts late events), never for loss.
    """
    up, reason = row["up"], row.get("down_reason")
    if row["final"] and up is False and (reason or LOSS) == LOSS and not row["missing"]:
        return False, LATE
    return up, reason


def day_availability(
    rows: Iterable[Mapping[str, Any]],
    day: date,
    *,
    final_before_ms: int | None,
    counted_from_ms: int | None = None,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """A UTC day's availability from its rows (report format); minutes without events are up.

    `final_before_ms`: minutes starting before this are final (the auditor's settled horizon,
    or one reckoned from a clock: within a minute, that minute is final too);
    later minutes of the day that have begun by `now_ms` are pending, those still to come are
    neither (`to_come_minutes`). None: every minute of the day is final. `now_ms` None: no
    clock, every minute after the horizon is pending (a day that is over).
    `counted_from_ms`: minutes before this are not counted at all (a range that starts
    within the day, or the first minute a running auditor ever accounted for); they are
    neither up nor pending (`not_counted_minutes`).
    A minute down for `late` counts as down for lag (an older auditor's row too: `verdict`).
    """
    day_start_ms = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
    end_ms = day_start_ms + DAY_MINUTES * MINUTE_MS
    start_ms = day_start_ms
    if counted_from_ms is not None:
        start_ms = min(end_ms, max(day_start_ms, counted_from_ms - counted_from_ms % MINUTE_MS))
    final_end = end_ms
    if final_before_ms is not None:
        final_before_ms += -final_before_ms % MINUTE_MS  # the end of the last minute it begins
        final_end = max(start_ms, min(end_ms, final_before_ms))
    final_minutes = (final_end - start_ms) // MINUTE_MS
    begun_end = end_ms if now_ms is None else now_ms - now_ms % MINUTE_MS + MINUTE_MS
    pending_end = max(final_end, min(end_ms, begun_end))
    down = {LOSS: 0, "lag": 0}
    for row in rows:
        minute_ms = parse_minute(row["minute"])
        if not start_ms <= minute_ms < final_end or not row["final"]:
            continue
        up, reason = verdict(row)
        if up is False:
            down["lag" if reason in ("lag", LATE) else LOSS] += 1
    down_minutes = sum(down.values())
    up_minutes = final_minutes - down_minutes
    ratio = up_minutes / final_minutes if final_minutes else None
    return {
        "day": day.isoformat(),
        "minutes": final_minutes,
        "pending_minutes": (pending_end - final_end) // MINUTE_MS,
        "to_come_minutes": (end_ms - pending_end) // MINUTE_MS,
        "not_counted_minutes": (start_ms - day_start_ms) // MINUTE_MS,
        "up_minutes": up_minutes,
        "down_minutes": down_minutes,
        "down_for_loss": down[LOSS],
        "down_for_lag": down["lag"],
        "availability_pct": None if ratio is None else round(100 * ratio, 4),
        "nines": nines(ratio),
        "all_up": ratio == 1,
    }


def nines(ratio: float | None) -> float | None:
    """Availability in nines, as the talk counts it: 0.999 is 3.0; None when no minute was down."""
    if ratio is None or ratio >= 1:
        return None
    return round(-math.log10(1 - ratio), 2)


def parse_minute(iso: str) -> int:
    """Epoch ms of a row's `minute` (ISO 8601 UTC)."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def parse_day(text: str) -> date:
    return date.fromisoformat(text)


def day_range_ms(day: date) -> tuple[int, int]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return int(start.timestamp() * 1000), int((start + timedelta(days=1)).timestamp() * 1000)


def render(rows: Sequence[Mapping[str, Any]], *, title: str) -> Table:
    """The per-minute table for a terminal; an `accepted` column when events were accepted
    (a destination fed by an ingest stream)."""
    table = Table(title=title, title_justify="left")
    accepting = any(row.get("accepted") for row in rows)
    for name, justify in [
        ("minute (UTC)", "left"),
        ("entered", "right"),
        *([("accepted", "right")] if accepting else []),
        ("delivered", "right"),
        ("dead", "right"),
        ("filtered", "right"),
        ("in retry", "right"),
        ("waiting", "right"),
        ("missing", "right"),
        ("dups", "right"),
        ("p50 ms", "right"),
        ("p95 ms", "right"),
        ("p99 ms", "right"),
        ("state", "left"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        dead = row["dead_lettered"]
        reasons = row["dead_lettered_by_reason"]
        dead_text = str(dead) + (
            f" ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))})" if dead else ""
        )
        state = "provisional"
        if row["final"]:
            state = "up" if row["up"] else f"DOWN ({row.get('down_reason') or '?'})"
        missing = str(row["missing"])
        table.add_row(
            row["minute"][:16].replace("T", " "),
            str(row["entered"]),
            *([str(row.get("accepted", 0))] if accepting else []),
            str(row["delivered"]),
            dead_text,
            str(row["filtered"]),
            str(row["in_retry"]),
            str(row.get("waiting", 0)),
            f"[bold red]{missing}[/]" if row["missing"] and row["final"] else missing,
            str(row["duplicates"]),
            _ms(row["lag_p50_ms"]),
            _ms(row["lag_p95_ms"]),
            _ms(row["lag_p99_ms"]),
            state,
        )
    return table


def render_availability(day: Mapping[str, Any], *, dest: str) -> Table:
    table = Table(title=f"{dest}: availability on {day['day']} (UTC)", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    pct = day["availability_pct"]
    for name, value in [
        ("final minutes", day["minutes"]),
        ("pending minutes", day["pending_minutes"]),
        ("still to come", day.get("to_come_minutes", 0)),
        ("not counted (no data)", day.get("not_counted_minutes", 0)),
        ("up minutes", day["up_minutes"]),
        ("down minutes", day["down_minutes"]),
        ("  for loss", day["down_for_loss"]),
        ("  for lag", day["down_for_lag"]),
        ("availability", "-" if pct is None else f"{pct:.4f} %"),
        ("nines", "all (no down minute)" if day["all_up"] else _nines_text(day["nines"])),
    ]:
        table.add_row(name, str(value))
    return table


def _nines_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ms(value: int | None) -> str:
    return "-" if value is None else str(value)
