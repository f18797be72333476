"""`spark-batch reconcile`: the per-minute loss tables rebuilt from the archive, by event id.

The auditor's live tables are fast and provisional; this recount is the authority. It reads
what the auditor saw enter (`entered` rows) and what every node said became of each event
(`outcomes` rows, one per event per audit fact) and joins them by origin
(`dest/topic/partition/offset`), the key both carry, in one shuffle: both row kinds are
shuffled by origin, outcome rows grouped per fact, then with the entered rows per origin
(`origins`); what the tables need is counted from those in one more aggregation (`tally`).
The rules are the auditor's (`hifi/accounting/ledger.py`):

- an origin counts in the minute the auditor filed it under (its `minute_ms`); repeated rows
  (a crash repeats a roll) and repeated facts (same `fact_id`) count once; an origin accepted
  by the ingest service (`accepted` rows, `hifi/accounting/accepted.py`) counts too, in the minute of
  its entry, or never seen entering in that of its own time (`origins._minute_of_entry`);
- its status is the first of: delivered (any 2xx: a later 2xx wins over a dead letter),
  dead-lettered (the reason of its first dead letter), filtered, in retry (handed off or
  re-offered, nothing final yet), missing (no outcome at all);
- `duplicates` are 2xx facts beyond the first; end-to-end lag is the first 2xx time minus the
  event time, lag-in the time the connector took the event in minus the event time, the
  node's process duration the first 2xx time minus that; percentiles are exact nearest-rank
  (`hifi.accounting.percentiles.rank_of`), computed from counts of each distinct value per minute;
- a minute is final when the auditor wrote it as final (its `minutes` rows), or when the
  archive reaches `settle_s` past its end (the newest Kafka timestamp entered or outcome
  time in it), and judged with `hifi.accounting.buckets.judge`:
  first deliveries more than `settle_s` after the minute ended are late, as live.

Settings (`settle_s`, `lag_sla_s`) are the versions the auditor wrote beside the rows, per
minute; `--lag-sla-s` overrides the SLA.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hifi.accounting.archive_layout import Kind
from hifi.accounting.buckets import MINUTE_MS, Counts, judge
from hifi.accounting.ledger import MAX_MISSING_IDS
from spark_batch.archive_input import (
    ENTERED_COLUMNS,
    OUTCOME_COLUMNS,
    ArchiveInputError,
    SettingsVersion,
    Window,
    read_rows,
    read_settings,
    settings_at,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
from spark_batch.origins import (
    ACCEPTED,
    ENTERED,
    ORIGIN,
    STATUSES,
    Names,
    first_offsets,
    names_of,
    origins,
    shuffle_partitions,
)
from spark_batch.tally import (
    DEAD_REASON,
    MEMBERS,
    PERCENTILES,
    RANKED,
    WHICH_MISSING,
    WHICH_NODE,
    WHICH_STATUS,
    on_time_expression,
    tally,
)

_MISSING_COLUMNS = [
    ("dest", "string"),
    ("minute_ms", "int64"),
    ("event_id", "string"),
    ("topic", "string"),
    ("partition", "int32"),
    ("offset", "int64"),
    ("event_time_ms", "int64"),
]


@dataclass
class Reconciled:
    """What a reconciliation found: minute rows (report format plus `dest`, `minute_ms`), the
    missing events as an Arrow table, per-node lag contribution, and the settings used."""

    minutes: list[dict[str, Any]]
    missing: (
        Any  # pyarrow.Table: dest, minute_ms, event_id, topic, partition, offset, event_time_ms
    )
    nodes: list[dict[str, Any]]
    horizon_ms: dict[str, int]  # per dest: how far the archive reaches (entered or outcome time)
    settings: dict[str, list[SettingsVersion]] = field(default_factory=dict)


_BROADCAST_MISSING_MAX = 1_000_000  # missing origins joined to their entered rows by broadcast


def reconcile(
    spark: SparkSession,
    archive: str,
    window: Window,
    *,
    dests: list[str] | None = None,
    lag_sla_s: float | None = None,
) -> Reconciled:
    """Rebuild the tables of `window` from the archive at `archive` (a path Spark reads)."""
    from pyspark.sql import functions as F

    entered = read_rows(spark, archive, Kind.ENTERED, ENTERED_COLUMNS, window, dests)
    if entered is None:
        raise ArchiveInputError(f"archive {archive}: no entered rows (is it an auditor's archive?)")
    outcomes = _outcomes_of(spark, archive, window, dests, entered)
    names, codes = names_of(spark, outcomes)
    in_window = (F.col("minute_ms") >= window.from_ms) & (F.col("minute_ms") < window.to_ms)
    partitions = shuffle_partitions(spark, entered, *([outcomes] if outcomes else []))
    firsts = first_offsets(spark, archive, dests) if names.accepting else None
    per_origin = origins(entered, outcomes, codes, partitions, firsts).where(in_window)
    settled = _settled_minutes(spark, archive, window, dests)
    versions = read_settings(spark, archive)
    found = sorted({v.dest for v in versions} | set(dests or []))
    tallied = tally(per_origin, on_time_expression(versions, found)).to_pylist()
    rows, dead_by_reason, lost = _minute_rows(tallied, names)
    if not rows:
        what = f"destination {', '.join(dests)}" if dests else "any destination"
        raise ArchiveInputError(f"archive {archive}: no entered rows of {what} in {_span(window)}")
    missing = _missing(spark, entered, lost)
    nodes = _nodes(tallied, names)
    return finish(rows, dead_by_reason, missing, nodes, versions, settled, lag_sla_s)


def _minute_rows(
    tallied: list[dict[str, Any]], names: Names
) -> tuple[list[dict[str, Any]], dict[tuple[str, int], dict[str, int]], list[dict[str, Any]]]:
    """From `tally`'s rows: the minute rows `finish` takes (counts and percentiles), the dead
    letters by reason, and the missing origins."""
    minutes: dict[tuple[str, int], dict[str, Any]] = {}
    dead_by_reason: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
    for counted in tallied:
        if counted["which"] == WHICH_STATUS:
            dest, minute_ms = counted["dest"], counted["key"]
            row = minutes.get((dest, minute_ms)) or minutes.setdefault(
                (dest, minute_ms), _empty_minute(dest, minute_ms)
            )
            n, value = int(counted["n"]), int(counted["value"])
            value, member = divmod(value, MEMBERS)
            row["entered"] += n if member & ENTERED else 0
            row["accepted"] += n if member & ACCEPTED else 0
            row[STATUSES[value % DEAD_REASON]] += n
            if value >= DEAD_REASON:
                dead_by_reason[dest, minute_ms][names.reasons[value // DEAD_REASON - 1]] = n
            row["duplicates"] += int(counted["duplicates_or_minute_ms"] or 0)
            row["on_time"] += int(counted["on_time_or_event_time_ms"] or 0)
            row["seen_ms_max"] = max(row["seen_ms_max"] or 0, counted["seen_ms_max"] or 0)
    for counted in tallied:
        ranked = RANKED.get(counted["which"])
        found = minutes.get((counted["dest"], counted["key"]))
        if ranked is not None and counted["which"] != WHICH_NODE and found is not None:
            name, pcts = ranked
            for pct in pcts:
                found[f"{name}_p{pct}_ms"] = counted[f"p{pct}"]
    lost = [counted for counted in tallied if counted["which"] == WHICH_MISSING]
    return list(minutes.values()), dict(dead_by_reason), lost


def _empty_minute(dest: str, minute_ms: int) -> dict[str, Any]:
    return {
        "dest": dest,
        "minute_ms": minute_ms,
        "entered": 0,
        "accepted": 0,
        **dict.fromkeys(STATUSES, 0),
        "duplicates": 0,
        "on_time": 0,
        "seen_ms_max": None,
        **{
            f"{name}_p{pct}_ms": None
            for which, (name, pcts) in RANKED.items()
            if which != WHICH_NODE
            for pct in pcts
        },
    }


def _nodes(tallied: list[dict[str, Any]], names: Names) -> list[dict[str, Any]]:
    """The lag contribution of each node that delivered: its process duration, exactly."""
    nodes = [
        {
            "dest": row["dest"],
            "node": names.nodes[row["key"]],
            "delivered": int(row["n"]),
            **{f"process_p{pct}_ms": row[f"p{pct}"] for pct in PERCENTILES},
        }
        for row in tallied
        if row["which"] == WHICH_NODE
    ]
    return sorted(nodes, key=lambda node: (node["dest"], node["node"]))


def _missing(spark: SparkSession, entered: DataFrame, lost: list[dict[str, Any]]) -> Any:
    """The missing events as an Arrow table, ordered by origin, with their ids from their
    entered rows (the greatest, as the rows of an origin normally agree)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    ids: dict[tuple[str, str, int, int], str | None] = {}
    if lost:
        origins = spark.createDataFrame(
            [(row["dest"], row["topic"], int(row["key"]), int(row["value"])) for row in lost],
            "dest string, topic string, partition int, offset long",
        )
        if len(lost) <= _BROADCAST_MISSING_MAX:
            origins = F.broadcast(origins)
        found = (
            entered.join(origins, ORIGIN, "left_semi")
            .groupBy(*ORIGIN)
            .agg(F.max("event_id").alias("event_id"))
            .toArrow()
            .to_pylist()
        )
        ids = {
            (row["dest"], row["topic"], row["partition"], row["offset"]): row["event_id"]
            for row in found
        }
    events = sorted(
        (
            row["dest"],
            row["topic"],
            int(row["key"]),
            int(row["value"]),
            row["duplicates_or_minute_ms"],
            row["on_time_or_event_time_ms"],
        )
        for row in lost
    )
    columns = {
        "dest": [e[0] for e in events],
        "minute_ms": [e[4] for e in events],
        "event_id": [ids.get(e[:4]) for e in events],
        "topic": [e[1] for e in events],
        "partition": [e[2] for e in events],
        "offset": [e[3] for e in events],
        "event_time_ms": [e[5] for e in events],
    }
    return pa.table({name: pa.array(columns[name], type) for name, type in _MISSING_COLUMNS})


def finish(
    rows: list[dict[str, Any]],
    dead_by_reason: dict[tuple[str, int], dict[str, int]],
    missing: Any,
    nodes: list[dict[str, Any]],
    versions: list[SettingsVersion],
    settled: set[tuple[str, int]],
    lag_sla_s: float | None,
) -> Reconciled:
    """The reconciliation from what the query counted: `rows` (per destination and minute the
    counts, `on_time`, `seen_ms_max` and the percentiles of `minute_table`), dead letters by
    reason, the missing events, the nodes; judged in Python (the bench's DuckDB reference
    finishes its own counts with this too)."""
    by_dest: dict[str, list[SettingsVersion]] = defaultdict(list)
    for version in versions:
        by_dest[version.dest].append(version)
    horizon = _horizons(rows)
    minutes = [
        _judged(row, dead_by_reason, versions, horizon[row["dest"]], lag_sla_s, settled)
        for row in sorted(rows, key=lambda r: (r["dest"], r["minute_ms"]))
    ]
    _name_missing(minutes, missing)
    return Reconciled(minutes, missing, nodes, horizon, dict(by_dest))


def _name_missing(minutes: list[dict[str, Any]], missing: Any) -> None:
    """Each minute's `missing_ids`: the ids of its missing events (the origin of one without),
    at most `MAX_MISSING_IDS`, as the auditor resolves them."""
    by_minute = {(row["dest"], row["minute_ms"]): row for row in minutes}
    columns = missing.select(
        ["dest", "minute_ms", "event_id", "topic", "partition", "offset"]
    ).to_pydict()
    for dest, minute_ms, event_id, topic, partition, offset in zip(*columns.values(), strict=True):
        row = by_minute.get((dest, minute_ms))
        if row is not None and len(row["missing_ids"]) < MAX_MISSING_IDS:
            row["missing_ids"].append(event_id or f"{topic}/{partition}/{offset}")


def _outcomes_of(
    spark: SparkSession, archive: str, window: Window, dests: list[str] | None, entered: DataFrame
) -> DataFrame | None:
    """Outcome rows filed under the window's dates, and those of entered events whose own
    time lies elsewhere (years off: the auditor filed them by Kafka time, the facts by the
    event's time), found by origin."""
    from pyspark.sql import functions as F

    windowed = read_rows(spark, archive, Kind.OUTCOMES, OUTCOME_COLUMNS, window, dests)
    if windowed is None:
        return None
    odd = entered.where(F.col("problem").isin("time_past", "time_future")).select(*ORIGIN)
    if odd.isEmpty():
        return windowed
    everywhere = read_rows(
        spark, archive, Kind.OUTCOMES, OUTCOME_COLUMNS, window, dests, any_date=True
    )
    assert everywhere is not None  # the dataset exists: `windowed` read it
    # rows read twice (odd events filed in the window's dates) count once: every aggregate
    # of `origins` is idempotent
    return windowed.unionByName(everywhere.join(F.broadcast(odd), ORIGIN, "left_semi"))


def _settled_minutes(
    spark: SparkSession, archive: str, window: Window, dests: list[str] | None
) -> set[tuple[str, int]]:
    """The minutes the auditor wrote as final (its progress clock settled them: a caught-up
    auditor's clock runs on while nothing new is archived)."""
    from pyspark.sql import functions as F

    rows = read_rows(spark, archive, Kind.MINUTES, ["dest", "minute_ms", "final"], window, dests)
    if rows is None:
        return set()
    final = rows.where(F.col("final")).select("dest", "minute_ms").distinct().collect()
    return {(row["dest"], int(row["minute_ms"])) for row in final}


def _span(window: Window) -> str:
    from hifi.accounting.tables import iso_minute

    return f"[{iso_minute(window.from_ms)}, {iso_minute(window.to_ms)})"


def _horizons(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How far the archive reaches, the same for every destination (as the auditor's progress
    clock is one clock): the newest Kafka timestamp entered or outcome time it holds."""
    latest = max((row["seen_ms_max"] or 0) for row in rows)
    return {row["dest"]: latest for row in rows}


def _judged(
    row: dict[str, Any],
    dead_by_reason: dict[tuple[str, int], dict[str, int]],
    versions: list[SettingsVersion],
    horizon_ms: int,
    lag_sla_s: float | None,
    settled: set[tuple[str, int]],
) -> dict[str, Any]:
    """A minute row with the archive's `minutes` columns (`hifi.accounting.tables.report_row` makes
    the report's), `dest`, and the settings it was judged by."""
    dest, minute_ms = row["dest"], row["minute_ms"]
    settings = settings_at(versions, dest, minute_ms)
    if lag_sla_s is not None:
        settings = settings.model_copy(update={"lag_sla_s": lag_sla_s})
    by_reason = dict(sorted(dead_by_reason.get((dest, minute_ms), {}).items()))
    counts = Counts(
        entered=int(row["entered"]),
        accepted=int(row.get("accepted", 0)),
        delivered=int(row["delivered"]),
        dead_lettered_by_reason=by_reason,
        filtered=int(row["filtered"]),
        in_retry=int(row["in_retry"]),
        missing=int(row["missing"]),
    )
    final = (dest, minute_ms) in settled or (
        minute_ms + MINUTE_MS + round(settings.settle_s * 1000) <= horizon_ms
    )
    up: bool | None = None
    down_reason: str | None = None
    if final:
        up, down_reason = judge(counts, row["lag_p95_ms"], int(row["on_time"]), settings)
    return {
        "dest": dest,
        "minute_ms": minute_ms,
        "entered": counts.entered,
        "accepted": counts.accepted,
        "delivered": counts.delivered,
        "dead_lettered": counts.dead_lettered,
        "dead_lettered_by_reason": by_reason,
        "filtered": counts.filtered,
        "in_retry": counts.in_retry,
        "missing": counts.missing,
        "duplicates": int(row["duplicates"]),
        "lag_p50_ms": row["lag_p50_ms"],
        "lag_p95_ms": row["lag_p95_ms"],
        "lag_p99_ms": row["lag_p99_ms"],
        "lag_in_p95_ms": row["lag_in_p95_ms"],
        "process_p95_ms": row["process_p95_ms"],
        "final": final,
        "up": up,
        "down_reason": down_reason,
        "missing_ids": [],  # filled from the missing events, as the auditor does (up to 1,000)
        "lag_sla_s": settings.lag_sla_s,
        "settle_s": settings.settle_s,
    }
