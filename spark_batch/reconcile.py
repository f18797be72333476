"""`spark-batch reconcile`: the per-minute loss tables rebuilt from the archive, by event id.

The auditor's live tables are fast and provisional; this recount is the authority. It reads
what the auditor saw enter (`entered` rows) and what every node said became of each event
(`outcomes` rows, one per event per audit fact) and joins them by origin
(`dest/topic/partition/offset`), the key both carry, in one shuffle: the two row kinds are
unioned and grouped by origin. The rules are the auditor's (`auditor/ledger.py`):

- an origin counts in the minute the auditor filed it under (its `minute_ms`); repeated rows
  (a crash repeats a roll) and repeated facts (same `fact_id`) count once;
- its status is the first of: delivered (any 2xx: a later 2xx wins over a dead letter),
  dead-lettered (the reason of its first dead letter), filtered, in retry (handed off or
  re-offered, nothing final yet), missing (no outcome at all);
- `duplicates` are 2xx facts beyond the first; end-to-end lag is the first 2xx time minus the
  event time, lag-in the time the connector took the event in minus the event time, the
  node's process duration the first 2xx time minus that; percentiles are exact nearest-rank
  (`auditor.ledger.rank_of`), computed from counts of each distinct value per minute;
- a minute is final when the auditor wrote it as final (its `minutes` rows), or when the
  archive reaches `settle_s` past its end (the newest Kafka timestamp entered or outcome
  time in it), and judged with `auditor.ledger.judge`:
  first deliveries more than `settle_s` after the minute ended are late, as live.

Settings (`settle_s`, `lag_sla_s`) are the versions the auditor wrote beside the rows, per
minute; `--lag-sla-s` overrides the SLA.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from auditor.archive_layout import Kind
from auditor.ledger import MAX_MISSING_IDS, MINUTE_MS, Counts, judge
from config.catalog import Accounting
from hifi.vocabulary import Outcome
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
    from pyspark.sql import Column, DataFrame, SparkSession

ORIGIN = ["dest", "topic", "partition", "offset"]
PERCENTILES = (50, 95, 99)
LAG_MAX_MS = 2**31 - 1  # as the ledger clamps
FUTURE_TOLERANCE_MS = 60_000
# minute-table columns the bench compares with its DuckDB reference
COMPARED = [
    "dest", "minute_ms", "entered", "delivered", "dead_lettered", "filtered", "in_retry",
    "missing", "duplicates", "lag_p50_ms", "lag_p95_ms", "lag_p99_ms",
]  # fmt: skip
_HANDED = (str(Outcome.HANDED_OFF), str(Outcome.RE_OFFERED))


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


def origins(entered: DataFrame, outcomes: DataFrame | None) -> DataFrame:
    """One row per origin that entered: where it counts and what became of it."""
    from pyspark.sql import functions as F

    e = entered.select(
        *ORIGIN, "minute_ms", "event_id", "event_time_ms", "kafka_ms", "problem",
        F.lit(None).cast("string").alias("fact_id"), F.lit(None).cast("string").alias("node"),
        F.lit(None).cast("string").alias("outcome"), F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("long").alias("outcome_ms"), F.lit(None).cast("long").alias("taken_ms"),
    )  # fmt: skip
    rows = e
    if outcomes is not None:
        o = outcomes.select(
            *ORIGIN, F.lit(None).cast("long").alias("minute_ms"),
            F.lit(None).cast("string").alias("event_id"),
            F.lit(None).cast("long").alias("event_time_ms"),
            F.lit(None).cast("long").alias("kafka_ms"), F.lit(None).cast("string").alias("problem"),
            "fact_id", "node", "outcome", "reason", "outcome_ms", "taken_ms",
        )  # fmt: skip
        rows = e.unionByName(o)
    delivered = F.col("outcome") == str(Outcome.DELIVERED)
    dead = F.col("outcome") == str(Outcome.DEAD_LETTERED)
    first_at = F.when(delivered, F.col("outcome_ms"))
    dead_at = F.when(dead, F.col("outcome_ms"))
    grouped = rows.groupBy(*ORIGIN).agg(
        F.min("minute_ms").alias("minute_ms"),
        F.max("event_id").alias("event_id"),
        F.min("event_time_ms").alias("event_time_ms"),
        F.max("kafka_ms").alias("kafka_ms"),
        F.max("problem").alias("problem"),
        F.size(F.collect_set(F.when(delivered, F.col("fact_id")))).alias("deliveries"),
        F.min(first_at).alias("first_2xx_ms"),
        F.max("outcome_ms").alias("last_outcome_ms"),
        F.min_by(F.when(delivered, F.col("taken_ms")), first_at).alias("taken_ms"),
        F.min_by(F.when(delivered, F.col("node")), first_at).alias("node"),
        F.min_by(F.when(dead, F.coalesce(F.col("reason"), F.lit("unknown"))), dead_at).alias(
            "dead_reason"
        ),
        F.max(dead.cast("int")).alias("dead"),
        F.max((F.col("outcome") == str(Outcome.FILTERED)).cast("int")).alias("filtered"),
        F.max(F.col("outcome").isin(*_HANDED).cast("int")).alias("handed"),
    )
    status = (
        F.when(F.col("deliveries") > 0, "delivered")
        .when(F.col("dead") == 1, "dead_lettered")
        .when(F.col("filtered") == 1, "filtered")
        .when(F.col("handed") == 1, "in_retry")
        .otherwise("missing")
    )
    lag_ok = F.col("first_2xx_ms").isNotNull() & ~F.coalesce(
        F.col("problem") == "time_future", F.lit(False)
    )
    taken_ok = (
        lag_ok
        & (F.col("taken_ms") > 0)
        & (F.col("event_time_ms") <= F.col("taken_ms") + FUTURE_TOLERANCE_MS)
    )
    return (
        grouped.where(F.col("minute_ms").isNotNull())
        .withColumn("status", status)
        .withColumn("duplicates", F.greatest(F.col("deliveries") - 1, F.lit(0)))
        .withColumn(
            "lag_ms", F.when(lag_ok, _clamp(F.col("first_2xx_ms") - F.col("event_time_ms")))
        )
        .withColumn("lag_in_ms", F.when(taken_ok, F.col("taken_ms") - F.col("event_time_ms")))
        .withColumn("process_ms", F.when(taken_ok, F.col("first_2xx_ms") - F.col("taken_ms")))
    )


def _clamp(column: Column) -> Column:
    from pyspark.sql import functions as F

    return F.least(F.greatest(column, F.lit(0)), F.lit(LAG_MAX_MS))


def nearest_ranks(
    values: DataFrame, keys: list[str], value: str, pcts: tuple[int, ...], prefix: str
) -> DataFrame:
    """Exact nearest-rank percentiles of `value` per `keys`: counts of each distinct value,
    a running sum in value order, and the smallest value whose running count reaches
    ceil(pct * n / 100), in integers (cum * 100 >= pct * n)."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    counted = values.where(F.col(value).isNotNull()).groupBy(*keys, value).count()
    ordered = W.partitionBy(*keys).orderBy(value).rowsBetween(W.unboundedPreceding, W.currentRow)
    whole = W.partitionBy(*keys)
    ranked = counted.withColumn("cum", F.sum("count").over(ordered)).withColumn(
        "n", F.sum("count").over(whole)
    )
    return ranked.groupBy(*keys).agg(
        *(
            F.min(F.when(F.col("cum") * 100 >= F.col("n") * pct, F.col(value))).alias(
                f"{prefix}_p{pct}_ms"
            )
            for pct in pcts
        )
    )


def on_time_expression(versions: list[SettingsVersion], dests: list[str]) -> Column:
    """1 for a first 2xx at most `settle_s` after its minute ended, per the settings version in
    force for that destination and minute; else 0."""
    from pyspark.sql import functions as F

    settle_ms: Column = F.lit(round(Accounting().settle_s * 1000))
    for dest in dests:
        mine = [v for v in versions if v.dest == dest]
        if not mine:
            continue
        per_dest: Column = F.lit(round(mine[0].settings.settle_s * 1000))
        for version in mine[1:]:
            per_dest = F.when(
                F.col("minute_ms") >= version.from_ms, round(version.settings.settle_s * 1000)
            ).otherwise(per_dest)
        settle_ms = F.when(F.col("dest") == dest, per_dest).otherwise(settle_ms)
    deadline = F.col("minute_ms") + MINUTE_MS + settle_ms
    return (F.col("first_2xx_ms").isNotNull() & (F.col("first_2xx_ms") <= deadline)).cast("int")


def minute_counts(per_origin: DataFrame, on_time: Column) -> DataFrame:
    """The count columns per destination and minute."""
    from pyspark.sql import functions as F

    def n(status: str) -> Column:
        return F.sum((F.col("status") == status).cast("long"))

    return per_origin.groupBy("dest", "minute_ms").agg(
        F.count(F.lit(1)).alias("entered"),
        n("delivered").alias("delivered"),
        n("dead_lettered").alias("dead_lettered"),
        n("filtered").alias("filtered"),
        n("in_retry").alias("in_retry"),
        n("missing").alias("missing"),
        F.sum("duplicates").alias("duplicates"),
        F.sum(on_time).alias("on_time"),
        F.max(F.greatest("kafka_ms", "last_outcome_ms")).alias("seen_ms_max"),
    )


def minute_table(per_origin: DataFrame, on_time: Column) -> DataFrame:
    """Counts and exact lag percentiles per destination and minute (no judgement yet)."""
    keys = ["dest", "minute_ms"]
    table = minute_counts(per_origin, on_time)
    for value, prefix, pcts in (
        ("lag_ms", "lag", PERCENTILES),
        ("lag_in_ms", "lag_in", (95,)),
        ("process_ms", "process", (95,)),
    ):
        table = table.join(nearest_ranks(per_origin, keys, value, pcts, prefix), keys, "left")
    return table


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
    in_window = (F.col("minute_ms") >= window.from_ms) & (F.col("minute_ms") < window.to_ms)
    per_origin = origins(entered, outcomes).where(in_window)
    settled = _settled_minutes(spark, archive, window, dests)
    versions = read_settings(spark, archive)
    found = sorted({v.dest for v in versions} | set(dests or []))
    per_origin = per_origin.persist()
    try:
        on_time = on_time_expression(versions, found)
        rows = [r.asDict() for r in minute_table(per_origin, on_time).collect()]
        if not rows:
            what = f"destination {', '.join(dests)}" if dests else "any destination"
            raise ArchiveInputError(
                f"archive {archive}: no entered rows of {what} in {_span(window)}"
            )
        dead_by_reason = _dead_by_reason(per_origin)
        missing = _missing(per_origin)
        nodes = _nodes(per_origin)
    finally:
        per_origin.unpersist()
    return finish(rows, dead_by_reason, missing, nodes, versions, settled, lag_sla_s)


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
    from auditor.tables import iso_minute

    return f"[{iso_minute(window.from_ms)}, {iso_minute(window.to_ms)})"


def _dead_by_reason(per_origin: DataFrame) -> dict[tuple[str, int], dict[str, int]]:
    from pyspark.sql import functions as F

    found: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
    counted = (
        per_origin.where(F.col("status") == "dead_lettered")
        .groupBy("dest", "minute_ms", "dead_reason")
        .count()
        .collect()
    )
    for row in counted:
        found[row["dest"], row["minute_ms"]][row["dead_reason"]] = int(row["count"])
    return found


def _missing(per_origin: DataFrame) -> Any:
    from pyspark.sql import functions as F

    return (
        per_origin.where(F.col("status") == "missing")
        .select("dest", "minute_ms", "event_id", "topic", "partition", "offset", "event_time_ms")
        .orderBy("dest", "topic", "partition", "offset")
        .toArrow()
    )


def _nodes(per_origin: DataFrame) -> list[dict[str, Any]]:
    """The lag contribution of each node that delivered: its process duration, exactly."""
    from pyspark.sql import functions as F

    delivered = per_origin.where(F.col("process_ms").isNotNull())
    counts = delivered.groupBy("dest", "node").agg(F.count(F.lit(1)).alias("delivered"))
    ranks = nearest_ranks(delivered, ["dest", "node"], "process_ms", PERCENTILES, "process")
    rows = counts.join(ranks, ["dest", "node"], "left").orderBy("dest", "node").collect()
    return [row.asDict() for row in rows]


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
    """A minute row with the archive's `minutes` columns (`auditor.tables.report_row` makes
    the report's), `dest`, and the settings it was judged by."""
    dest, minute_ms = row["dest"], row["minute_ms"]
    settings = settings_at(versions, dest, minute_ms)
    if lag_sla_s is not None:
        settings = settings.model_copy(update={"lag_sla_s": lag_sla_s})
    by_reason = dict(sorted(dead_by_reason.get((dest, minute_ms), {}).items()))
    counts = Counts(
        entered=int(row["entered"]),
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
