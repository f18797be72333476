"""The lead share's duties: write a destination's merged final minutes, raise its loss alarm.

Of a destination's shares, the first source partition is its lead (`DestinationView.lead`);
the member that owns it writes what one auditor wrote when a minute became final, over the sum
of every share (`auditor/merged.py`): the archive's `minutes` row, the final-minute metrics, the
loss alarm and the down minutes behind the availability gauge. A final minute that changes
later (a late outcome in a share, its missing ids named) gets a new row, its lags and its
judgement as they were when it became final, as one auditor's: down for loss once events of it
went missing, down for late once a minute down for loss has none missing again
(`late.rejudged`). A share's row of it carries when its member changed it, and the lead keeps
the newest change each final minute took in (a member's clock is not compared with another's
last look). What it wrote (up to which minute, those changes, the down minutes of the last day)
is kept in the lead share's snapshot (`Share.lead`), so the member that gets the share next
carries on where it stopped, and in a file of the board (`_final--DEST.board`) from which every
member answers `/tables` for the final minutes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from auditor import metrics
from auditor.merged import DestinationView
from auditor.share_rows import Row, loss_ratio, merged_row
from hifi.accounting.buckets import MINUTE_MS, Bucket, Counts, Settled
from hifi.accounting.late import LOSS, rejudged
from hifi.accounting.tables import iso_minute

log = structlog.get_logger(__name__)

DAY_MS = 86_400_000
_COUNT_KEYS = ("entered", "accepted", "delivered", "filtered", "in_retry", "waiting", "missing")


def final_file(directory: Path, dest: str) -> Path:
    return directory / f"_final--{dest}.board"


def read_final_rows(directory: Path, dest: str) -> dict[int, Row]:
    """The merged final rows the lead's member last wrote (none before it wrote any)."""
    try:
        raw = msgspec.msgpack.decode(final_file(directory, dest).read_bytes())
    except (OSError, msgspec.DecodeError):
        return {}
    return {int(row["minute_ms"]): row for row in raw}


def write_final_rows(directory: Path, dest: str, rows: dict[int, Row]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    final = final_file(directory, dest)
    temp = final.with_name(f".{final.name}.{os.getpid()}.tmp")  # two leads in a handover
    temp.write_bytes(msgspec.msgpack.encode([rows[m] for m in sorted(rows)]))
    temp.replace(final)


def recounted(final: Row, rows: list[Row], *, written_ms: int) -> Row:
    """A final minute's row after a share's counts changed: the counts summed again, its lags
    and judgement as they were when it became final, unless events went missing since (a
    partition's delivering group committed past events without an outcome, or retention
    removed them while they waited): then it is down for loss; and a minute down for loss
    whose missing events all turned up (late outcomes, the group's offset moved back) is down
    for late (`late.rejudged`)."""
    again = merged_row(rows, _NO_JUDGING, minute_ms=final["minute_ms"], final=False, written_ms=0)
    row = dict(final)
    for key in (*_COUNT_KEYS, "dead_lettered", "dead_lettered_by_reason", "duplicates"):
        row[key] = again[key]
    row["missing_ids"] = again["missing_ids"]
    row["written_ms"] = written_ms
    rise = row["missing"] - final.get("missing", 0)
    row["up"], row["down_reason"] = rejudged(
        final.get("up"), final.get("down_reason"), row["missing"], rise
    )
    return row


class _NoJudging:
    """Settings a provisional sum never reads (no minute is judged when not final)."""


_NO_JUDGING: Any = _NoJudging()


def serve(
    view: DestinationView,
    state: dict[str, Any],
    *,
    write_row: Callable[[Row], None],
    now_ms: int,
    retention_ms: int,
) -> bool:
    """Write the merged minutes that became final or changed since the last call; `state` is
    the lead share's (`Share.lead[dest]`). True when a final row was written."""
    name = view.dest.name
    horizon = view.final_before_ms()
    before = state.get("before_ms")
    checked_ms = int(state.get("checked_ms", 0))  # a lead state of before `changes`: its last look
    # per final minute, the newest change of a share its row took in: a share's change comes
    # from its member's clock, through the board, so it is weighed against the share's changes
    # already taken, not against when this member looked last
    changes: dict[int, int] = {int(m): int(c) for m, c in state.get("changes", ())}
    down: dict[int, str] = {int(m): str(r) for m, r in state.get("down", ())}
    wrote = False
    for minute, rows in sorted(view.rows_by_minute().items()):
        if minute >= horizon:
            break
        changed_ms = max(int(r["changed_ms"]) for r in rows)
        if before is not None and minute < before:
            final = view.final_rows.get(minute)
            if final is not None and changed_ms > changes.get(minute, checked_ms):
                row = view.final_rows[minute] = recounted(final, rows, written_ms=now_ms)
                write_row(row)
                if row["missing"] > final.get("missing", 0):  # lost since: an alarm of its own
                    _lost_since(name, row, final, view)
                if row["down_reason"] is not None:  # loss, or late once none is missing again
                    down[minute] = row["down_reason"]
                changes[minute] = changed_ms
                wrote = True
            continue
        row = merged_row(
            rows, view.dest.accounting, minute_ms=minute, final=True, written_ms=now_ms
        )
        view.final_rows[minute] = row
        write_row(row)
        changes[minute] = changed_ms
        wrote = True
        _count_final(name, row, view, down)
    if horizon and (before is None or horizon > before):
        first = view.counted_from_ms()
        since = before if before is not None else (first if first is not None else horizon)
        metrics.count_final(name, None, since - MINUTE_MS, horizon - MINUTE_MS)
        state["before_ms"] = horizon
        state["first_ms"] = state.get("first_ms") or first
    keep_from = horizon - DAY_MS
    state["down"] = [[m, r] for m, r in sorted(down.items()) if m >= keep_from]
    for minute in [m for m in view.final_rows if m < horizon - retention_ms]:
        del view.final_rows[minute]
    state["changes"] = sorted([m, c] for m, c in changes.items() if m in view.final_rows)
    _availability(name, state, horizon)
    return wrote


def _lost_since(name: str, row: Row, final: Row, view: DestinationView) -> None:
    """Events of a final minute went missing after it became final (they waited in a source
    partition and the delivering group committed past them, or retention removed them). The
    down minutes' counter counts a minute once, for the reason it first went down for: an up
    minute now, not one down already (for lag, or late before)."""
    ratio = loss_ratio(row)
    alarm = ratio > view.dest.accounting.loss_alarm_ratio
    metrics.lost_since(name, row["missing"] - final.get("missing", 0), alarm=alarm)
    if final.get("up") is not False:
        metrics.DOWN_MINUTES.labels(name, LOSS).inc()
    if alarm:
        _alarm_line(name, row, ratio, since_final=True)


def _count_final(name: str, row: Row, view: DestinationView, down: dict[int, str]) -> None:
    ratio = loss_ratio(row)
    alarm = row["missing"] > 0 and ratio > view.dest.accounting.loss_alarm_ratio
    counts = Counts(**{k: row.get(k, 0) for k in _COUNT_KEYS})
    counts.dead_lettered_by_reason = dict(row["dead_lettered_by_reason"])
    bucket = Bucket(row["minute_ms"], up=row["up"], down_reason=row["down_reason"])
    metrics.count_settled(name, counts, row["lag_p95_ms"], Settled(bucket, ratio, alarm))
    if row["down_reason"] is not None:
        down[row["minute_ms"]] = row["down_reason"]
    if alarm:
        _alarm_line(name, row, ratio)


def _alarm_line(name: str, row: Row, ratio: float, **extra: Any) -> None:
    log.error(
        "loss_alarm",
        dest=name,
        minute=iso_minute(row["minute_ms"]),
        missing=row["missing"],
        entered=row["entered"],
        accepted=row["accepted"],
        loss_ratio=round(ratio, 6),
        **extra,
    )


def _availability(name: str, state: dict[str, Any], horizon: int) -> None:
    """The share of the last day's final minutes that were up (empty minutes are up)."""
    first = state.get("first_ms")
    if first is None or not horizon:
        return
    start = max(int(first), horizon - DAY_MS)
    minutes = (horizon - start) // MINUTE_MS
    if minutes <= 0:
        return
    down = sum(1 for m, _ in state["down"] if start <= m < horizon)
    metrics.AVAILABILITY.labels(name).set(1 - down / minutes)
