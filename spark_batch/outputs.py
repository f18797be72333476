"""What `spark-batch reconcile` leaves under `--out`, written whole or not at all.

    OUT/minutes.parquet   one row per destination and minute (the archive's minute columns,
                          with dest and the settings each minute was judged by)
    OUT/missing.parquet   the missing events: dest, minute_ms, event_id, topic, partition,
                          offset, event_time_ms (the input of `connector backfill --only-missing`)
    OUT/days.parquet      per destination and UTC day: availability, totals
    OUT/nodes.parquet     per destination and node: lag contribution (process duration)
    OUT/minutes.json      one object per destination and minute: `dest` and the keys of
                          `auditor report --format json`
    OUT/summary.json      per destination: totals, days, worst minutes, nodes
    OUT/report.html       the same for a person, with charts (OUT/charts/*.png)

Everything is written into a temporary directory beside OUT, then swapped in by renames, so a
crash or a refused input leaves the previous output (or none), never half of one. The same
input gives the same files: rows are sorted, JSON keys are sorted, and nothing records when
it ran.
"""

from __future__ import annotations

import shutil
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from hifi.accounting.buckets import MINUTE_MS, minute_of
from hifi.accounting.tables import day_range_ms, iso_minute, nines, report_row
from spark_batch.archive_input import Window
from spark_batch.reconcile import Reconciled
from spark_batch.report import write_report
from spark_batch.verdicts import loss_verdict, minute_state

# loss_verdict is read here by older callers; spark_batch.verdicts owns it
__all__ = [
    "DAYS_SCHEMA",
    "MINUTES_SCHEMA",
    "MISSING_SCHEMA",
    "NODES_SCHEMA",
    "loss_verdict",
    "summarize",
    "write_outputs",
]

WORST_MINUTES = 10
_I64, _STR, _F64, _BOOL = pa.int64(), pa.string(), pa.float64(), pa.bool_()
MINUTES_SCHEMA = pa.schema(
    [
        ("dest", _STR),
        ("minute_ms", _I64),
        ("entered", _I64),
        ("accepted", _I64),
        ("delivered", _I64),
        ("dead_lettered", _I64),
        ("dead_lettered_by_reason", pa.map_(_STR, _I64)),
        ("filtered", _I64),
        ("in_retry", _I64),
        ("missing", _I64),
        ("duplicates", _I64),
        ("lag_p50_ms", _I64),
        ("lag_p95_ms", _I64),
        ("lag_p99_ms", _I64),
        ("lag_in_p95_ms", _I64),
        ("process_p95_ms", _I64),
        ("final", _BOOL),
        ("up", _BOOL),
        ("down_reason", _STR),
        ("missing_ids", pa.list_(_STR)),
        ("lag_sla_s", _F64),
        ("settle_s", _F64),
    ]
)
NODES_SCHEMA = pa.schema(
    [
        ("dest", _STR),
        ("node", _STR),
        ("delivered", _I64),
        ("process_p50_ms", _I64),
        ("process_p95_ms", _I64),
        ("process_p99_ms", _I64),
    ]
)
MISSING_SCHEMA = pa.schema(
    [
        ("dest", _STR),
        ("minute_ms", _I64),
        ("event_id", _STR),
        ("topic", _STR),
        ("partition", pa.int32()),
        ("offset", _I64),
        ("event_time_ms", _I64),
    ]
)
DAYS_SCHEMA = pa.schema(
    [
        ("dest", _STR),
        ("day", _STR),
        ("minutes", _I64),
        ("pending_minutes", _I64),
        ("up_minutes", _I64),
        ("down_minutes", _I64),
        ("down_for_loss", _I64),
        ("down_for_lag", _I64),
        ("availability_pct", _F64),
        ("nines", _F64),
        ("all_up", _BOOL),
        ("range_minutes", _I64),
    ]
)
_TOTALS = (
    "entered",
    "accepted",  # by the ingest service (0 for a destination fed otherwise)
    "delivered",
    "dead_lettered",
    "filtered",
    "in_retry",
    "missing",
    "duplicates",
)


def summarize(result: Reconciled, window: Window, *, archive: str) -> dict[str, Any]:
    """The JSON summary: per destination its totals, days, worst minutes and nodes."""
    by_dest: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in result.minutes:
        by_dest[row["dest"]].append(row)
    nodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for node in result.nodes:
        nodes[node["dest"]].append({k: v for k, v in node.items() if k != "dest"})
    destinations = {}
    for dest, rows in sorted(by_dest.items()):
        totals = {key: sum(int(row.get(key, 0)) for row in rows) for key in _TOTALS}
        # the archive says nothing of the range's minutes before its first minute of dest
        counted_from_ms = max(window.from_ms, min(int(row["minute_ms"]) for row in rows))
        final_before_ms = _final_before_ms(rows, window, result.horizon_ms[dest])
        days = _days(rows, window, counted_from_ms, final_before_ms)
        pending = sum(day["pending_minutes"] for day in days)
        destinations[dest] = {
            "totals": totals,
            "lossless": totals["missing"] == 0 and pending == 0,
            "on_time": all(day["down_for_lag"] == 0 for day in days),
            "range_minutes": (window.to_ms - window.from_ms) // MINUTE_MS,
            "final_minutes": sum(day["minutes"] for day in days),
            "pending_minutes": pending,
            "counted_from_ms": counted_from_ms,
            "final_before_ms": final_before_ms,
            "days": days,
            "worst_minutes": _worst(rows),
            "nodes": nodes.get(dest, []),
        }
    return {
        "archive": archive,
        "from": iso_minute(window.from_ms),
        "to": iso_minute(window.to_ms),
        "destinations": destinations,
    }


def _final_before_ms(rows: list[dict[str, Any]], window: Window, horizon_ms: int) -> int:
    """Minutes starting before this are final: the archive reaches past them and their settle."""
    settle_ms = round(max(float(row["settle_s"]) for row in rows) * 1000)
    return min(window.to_ms, minute_of(horizon_ms - settle_ms - MINUTE_MS) + MINUTE_MS)


def _days(
    rows: list[dict[str, Any]], window: Window, counted_from_ms: int, final_before_ms: int
) -> list[dict[str, Any]]:
    """Per UTC day of the window: availability over its final minutes (`minutes`), how many of
    its minutes of the range are not final (`pending_minutes`) and how many it holds."""
    by_minute = {int(row["minute_ms"]): row for row in rows}
    first = datetime.fromtimestamp(window.from_ms / 1000, UTC).date()
    last = datetime.fromtimestamp((window.to_ms - 1) / 1000, UTC).date()
    days, day = [], first
    while day <= last:
        start_ms, end_ms = day_range_ms(day)
        states: Counter[str] = Counter(
            minute_state(
                by_minute.get(minute_ms),
                minute_ms,
                counted_from_ms=counted_from_ms,
                final_before_ms=final_before_ms,
                to_ms=window.to_ms,
            )
            for minute_ms in range(max(start_ms, window.from_ms), end_ms, MINUTE_MS)
        )
        final = states["up"] + states["loss"] + states["lag"]
        ratio = states["up"] / final if final else None
        days.append(
            {
                "day": day.isoformat(),
                "minutes": final,
                "pending_minutes": states["pending"],
                "up_minutes": states["up"],
                "down_minutes": states["loss"] + states["lag"],
                "down_for_loss": states["loss"],
                "down_for_lag": states["lag"],
                "availability_pct": None if ratio is None else round(100 * ratio, 4),
                "nines": nines(ratio),
                "all_up": ratio == 1,
                "range_minutes": (min(end_ms, window.to_ms) - max(start_ms, window.from_ms))
                // MINUTE_MS,
            }
        )
        day += timedelta(days=1)
    return days


def _worst(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    down = [row for row in rows if row["up"] is False]
    down.sort(key=lambda r: (-int(r["missing"]), -(r["lag_p95_ms"] or 0), r["minute_ms"]))
    return [
        {
            "minute": iso_minute(row["minute_ms"]),
            "down_reason": row["down_reason"],
            "missing": row["missing"],
            "lag_p95_ms": row["lag_p95_ms"],
            "entered": row["entered"],
        }
        for row in down[:WORST_MINUTES]
    ]


def write_outputs(out: Path, result: Reconciled, summary: Mapping[str, Any]) -> list[Path]:
    """Write every output into a temporary directory beside `out`, then swap it in."""
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    building = out.with_name(f".{out.name}.tmp-{token}")
    building.mkdir()
    try:
        _write_tables(building, result, summary)
        _write_json(building / "minutes.json", _minutes_json(result.minutes))
        _write_json(building / "summary.json", summary)
        write_report(building, result, summary)
        _swap_in(building, out, token)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return sorted(path for path in out.rglob("*") if path.is_file())


def _minutes_json(minutes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"dest": row["dest"], **report_row(row)} for row in minutes]


def _write_tables(directory: Path, result: Reconciled, summary: Mapping[str, Any]) -> None:
    minutes = [
        {
            name: row.get(name, 0) if name == "accepted" else row[name]
            for name in MINUTES_SCHEMA.names
        }
        for row in result.minutes
    ]
    for row in minutes:
        row["dead_lettered_by_reason"] = list(row["dead_lettered_by_reason"].items())
    pq.write_table(pa.Table.from_pylist(minutes, MINUTES_SCHEMA), directory / "minutes.parquet")
    missing = result.missing.select(MISSING_SCHEMA.names).cast(MISSING_SCHEMA)
    pq.write_table(missing, directory / "missing.parquet")
    nodes = [{name: row.get(name) for name in NODES_SCHEMA.names} for row in result.nodes]
    pq.write_table(pa.Table.from_pylist(nodes, NODES_SCHEMA), directory / "nodes.parquet")
    days = [
        {"dest": dest, **day}
        for dest, about in summary["destinations"].items()
        for day in about["days"]
    ]
    pq.write_table(pa.Table.from_pylist(days, DAYS_SCHEMA), directory / "days.parquet")


def _write_json(path: Path, value: Any) -> None:
    """Sorted keys, indented, a final newline (orjson writes dates as ISO 8601)."""
    options = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    path.write_bytes(orjson.dumps(value, option=options))


def _swap_in(building: Path, out: Path, token: str) -> None:
    """Replace `out` by `building`: two renames, the old output removed last."""
    old = out.with_name(f".{out.name}.old-{token}")
    if out.exists():
        out.rename(old)
    building.rename(out)
    if old.exists():
        shutil.rmtree(old)
