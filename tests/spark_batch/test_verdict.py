"""The reconciliation's verdict counts what is final: availability over final minutes (and how
many of the range's minutes that is), a headline that never says lossless while minutes are not
final, and an availability strip coloured as its legend says. No Spark: the reconciled minutes
are given as `spark_batch.reconcile` leaves them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from hifi.accounting.buckets import MINUTE_MS
from spark_batch.archive_input import Window
from spark_batch.cli import verdict_line
from spark_batch.outputs import loss_verdict, summarize
from spark_batch.reconcile import Reconciled
from spark_batch.report import strip_states
from tests.spark_batch.support import T0

DAY_START_MS = T0 - 10 * 3_600_000  # 00:00 UTC of the support archives' day
FIRST_MS = DAY_START_MS + (22 * 60 + 11) * MINUTE_MS  # 22:11, the archive's first minute
FINAL_ROWS, PENDING_ROWS = 3, 106  # 22:11 to 22:13 final, 22:14 to 23:59 not


def _minute(minute_ms: int, *, final: bool, missing: int = 0) -> dict[str, Any]:
    up = (missing == 0) if final else None
    return {
        "dest": "shop",
        "minute_ms": minute_ms,
        "entered": 10,
        "delivered": 10 - missing,
        "dead_lettered": 0,
        "dead_lettered_by_reason": {},
        "filtered": 0,
        "in_retry": 0,
        "missing": missing,
        "duplicates": 0,
        "lag_p50_ms": 40,
        "lag_p95_ms": 90,
        "lag_p99_ms": 120,
        "lag_in_p95_ms": 10,
        "process_p95_ms": 30,
        "final": final,
        "up": up,
        "down_reason": None if up in (True, None) else "loss",
        "missing_ids": [],
        "lag_sla_s": 1.0,
        "settle_s": 60.0,
    }


def _reconciled(pending_rows: int) -> tuple[Reconciled, Window]:
    count = FINAL_ROWS + pending_rows
    minutes = [_minute(FIRST_MS + i * MINUTE_MS, final=i < FINAL_ROWS) for i in range(count)]
    final_before_ms = FIRST_MS + FINAL_ROWS * MINUTE_MS
    horizon_ms = final_before_ms + 60_000 + 30_000  # a minute past the settle of 22:13
    if not pending_rows:
        horizon_ms = DAY_START_MS + 1440 * MINUTE_MS + 120_000  # the archive reaches past the day
    missing = pa.table({"dest": pa.array([], pa.string())})
    window = Window(DAY_START_MS, DAY_START_MS + 1440 * MINUTE_MS)
    return Reconciled(minutes, missing, [], {"shop": horizon_ms}), window


def test_a_day_with_minutes_not_final_is_not_lossless_nor_all_up() -> None:
    """3 final minutes and 106 not final: availability over the 3, 106 pending, no "lossless",
    and every minute not final (or not in the archive) is not drawn as up."""
    result, window = _reconciled(PENDING_ROWS)
    summary = summarize(result, window, archive="a")
    about = summary["destinations"]["shop"]
    [day] = about["days"]
    assert (day["minutes"], day["up_minutes"], day["pending_minutes"]) == (3, 3, 106)
    assert (day["range_minutes"], day["availability_pct"]) == (1440, 100.0)
    assert about["lossless"] is False
    assert loss_verdict(about) == ("no loss so far, 106 minutes not final", "warn")
    line = verdict_line("shop", about)
    assert "no loss so far, 106 minutes not final" in line
    assert "lossless" not in line
    assert "availability over 3 final minutes of the range's 1,440" in line

    [cells] = strip_states(result.minutes, about, to_ms=window.to_ms)
    first = (FIRST_MS - DAY_START_MS) // MINUTE_MS
    assert set(cells[:first]) == {"outside"}  # before the archive's first minute
    assert cells[first : first + FINAL_ROWS] == ["up"] * FINAL_ROWS
    assert set(cells[first + FINAL_ROWS :]) == {"pending"}
    assert len(cells) == 1440


def test_a_day_all_final_without_loss_is_lossless() -> None:
    """The same minutes, all final and nothing missing: "lossless", and the rest of the day after
    the archive's last minute counts as up (no event, nothing lost)."""
    result, window = _reconciled(0)
    for row in result.minutes:
        row.update(final=True, up=True)
    about = summarize(result, window, archive="a")["destinations"]["shop"]
    [day] = about["days"]
    first = (FIRST_MS - DAY_START_MS) // MINUTE_MS
    assert (day["minutes"], day["pending_minutes"]) == (1440 - first, 0)
    assert about["lossless"] is True
    assert loss_verdict(about) == ("lossless", "good")
    cells = strip_states(result.minutes, about, to_ms=window.to_ms)[0]
    assert cells.count("up") == 1440 - first


def test_a_missing_event_is_named_even_while_minutes_are_pending() -> None:
    """A final minute with a missing event: the headline says how many are missing."""
    result, window = _reconciled(PENDING_ROWS)
    result.minutes[1].update(missing=2, up=False, down_reason="loss", delivered=8)
    about = summarize(result, window, archive="a")["destinations"]["shop"]
    assert loss_verdict(about) == ("2 events missing", "bad")
    [day] = about["days"]
    assert (day["down_for_loss"], day["up_minutes"], day["minutes"]) == (1, 2, 3)
    cells = strip_states(result.minutes, about, to_ms=window.to_ms)[0]
    assert cells[(FIRST_MS - DAY_START_MS) // MINUTE_MS + 1] == "loss"
