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
_HANDED = (str(Outcome.HANDED_OFF), str(Outcome.RE_OFFERED))
_MISSING_COLUMNS = [
    ("dest", "string"), ("minute_ms", "int64"), ("event_id", "string"), ("topic", "string"),
    ("partition", "int32"), ("offset", "int64"), ("event_time_ms", "int64"),
]  # fmt: skip


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


# The union of entered and outcome rows carries only fixed-width columns besides the origin
# and the fact id, so Spark aggregates it in hash maps (a string or set in an aggregation
# buffer makes it sort every row): what a row is goes in the bits of `code`, and its three
# times in `a`, `b`, `c`:
#   entered rows:  kind _ROW_ENTERED and problem flags; a = minute_ms, b = event_time_ms,
#                  c = kafka_ms
#   outcome rows:  kind of outcome, the codes of its reason and node (`Names`);
#                  a = outcome_ms, b = taken_ms
_ROW_ENTERED, _ROW_DELIVERED, _ROW_DEAD, _ROW_FILTERED, _ROW_HANDED, _ROW_OTHER = range(6)
_KIND = 0x0F
_FUTURE = 0x10  # an entered row whose problem is time_future
_AFTER_FUTURE = 0x20  # one whose problem sorts after time_future (then max(problem) is not it)
_REASON_SHIFT, _REASON_MASK = 8, (1 << 24) - 1
_NODE_SHIFT = 32
# an origin's status, by the auditor's precedence
STATUSES = ("delivered", "dead_lettered", "filtered", "in_retry", "missing")
DELIVERED, DEAD_LETTERED, FILTERED, IN_RETRY, MISSING = range(len(STATUSES))
_UNKNOWN_REASON = "unknown"
_BROADCAST_MISSING_MAX = 1_000_000  # missing origins joined to their entered rows by broadcast


@dataclass(frozen=True)
class Names:
    """The node names and dead-letter reasons of the outcome rows, by the codes the rows carry
    (a reason code names `coalesce(reason, 'unknown')`)."""

    nodes: list[str]
    reasons: list[str]


def names_of(spark: SparkSession, outcomes: DataFrame | None) -> tuple[Names, DataFrame | None]:
    """The distinct nodes and reasons of `outcomes` (a small aggregation), and a table of
    (node, reason_key, named): the code bits of each pair, for a broadcast join."""
    from pyspark.sql import functions as F

    if outcomes is None:
        return Names([], []), None
    pairs = outcomes.select("node", _reason_key().alias("reason_key")).distinct().collect()
    nodes = sorted({row["node"] for row in pairs})
    reasons = sorted({row["reason_key"] for row in pairs})
    node_code = {name: i for i, name in enumerate(nodes)}
    reason_code = {name: i for i, name in enumerate(reasons)}
    if len(reasons) > _REASON_MASK:
        raise ArchiveInputError(f"the outcome rows name {len(reasons):,} reasons: too many")
    codes = spark.createDataFrame(
        [
            (row["node"], row["reason_key"],
             node_code[row["node"]] << _NODE_SHIFT | reason_code[row["reason_key"]] << _REASON_SHIFT)
            for row in pairs
        ],
        "node string, reason_key string, named long",
    )  # fmt: skip
    return Names(nodes, reasons), F.broadcast(codes)


def _reason_key() -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.col("reason"), F.lit(_UNKNOWN_REASON))


def _rows(entered: DataFrame, outcomes: DataFrame | None, codes: DataFrame | None) -> DataFrame:
    """Entered and outcome rows in one frame of fixed-width columns (see `_ROW_ENTERED`)."""
    from pyspark.sql import functions as F

    problem = F.col("problem")
    flags = F.when(problem == "time_future", _FUTURE).otherwise(0) + F.when(
        problem > "time_future", _AFTER_FUTURE
    ).otherwise(0)
    rows = entered.select(
        *ORIGIN, F.lit(None).cast("string").alias("fact_id"),
        (F.lit(_ROW_ENTERED) + flags).cast("long").alias("code"),
        F.col("minute_ms").alias("a"), F.col("event_time_ms").alias("b"),
        F.col("kafka_ms").alias("c"),
    )  # fmt: skip
    if outcomes is None or codes is None:
        return rows
    outcome = F.col("outcome")
    kind = (
        F.when(outcome == str(Outcome.DELIVERED), _ROW_DELIVERED)
        .when(outcome == str(Outcome.DEAD_LETTERED), _ROW_DEAD)
        .when(outcome == str(Outcome.FILTERED), _ROW_FILTERED)
        .when(outcome.isin(*_HANDED), _ROW_HANDED)
        .otherwise(_ROW_OTHER)
    )
    o = outcomes.withColumn("reason_key", _reason_key()).join(codes, ["node", "reason_key"])
    return rows.unionByName(
        o.select(
            *ORIGIN,
            "fact_id",
            (F.col("named") + kind).alias("code"),
            F.col("outcome_ms").alias("a"),
            F.col("taken_ms").alias("b"),
            F.lit(None).cast("long").alias("c"),
        )
    )


def origins(entered: DataFrame, outcomes: DataFrame | None, codes: DataFrame | None) -> DataFrame:
    """One row per origin that entered: where it counts and what became of it.

    One shuffle, by origin; then two hash aggregations in place (the partitioning by origin
    serves both): per origin and fact id (a fact archived twice counts once), then per origin.
    """
    from pyspark.sql import functions as F

    code = F.col("code")
    kind = code.bitwiseAND(_KIND)

    def of(which: int, column: Column) -> Column:
        return F.when(kind == which, column)

    def flag(which: int) -> Column:
        return F.max((kind == which).cast("int"))

    a, b, c = F.col("a"), F.col("b"), F.col("c")
    per_fact = (
        _rows(entered, outcomes, codes)
        .repartition(*ORIGIN)
        .groupBy(*ORIGIN, "fact_id")
        .agg(
            F.min(of(_ROW_ENTERED, a)).alias("minute_ms"),
            F.min(of(_ROW_ENTERED, b)).alias("event_time_ms"),
            F.max(of(_ROW_ENTERED, c)).alias("kafka_ms"),
            F.max(of(_ROW_ENTERED, code.bitwiseAND(_FUTURE))).alias("future"),
            F.max(of(_ROW_ENTERED, code.bitwiseAND(_AFTER_FUTURE))).alias("after_future"),
            flag(_ROW_DELIVERED).alias("delivered"),
            F.min(of(_ROW_DELIVERED, a)).alias("first_2xx_ms"),
            F.min_by(of(_ROW_DELIVERED, b), of(_ROW_DELIVERED, a)).alias("taken_ms"),
            F.min_by(
                of(_ROW_DELIVERED, F.shiftright(code, _NODE_SHIFT)), of(_ROW_DELIVERED, a)
            ).alias("node"),
            F.min(of(_ROW_DEAD, a)).alias("dead_ms"),
            F.min_by(
                of(_ROW_DEAD, F.shiftright(code, _REASON_SHIFT).bitwiseAND(_REASON_MASK)),
                of(_ROW_DEAD, a),
            ).alias("reason"),
            flag(_ROW_DEAD).alias("dead"),
            flag(_ROW_FILTERED).alias("filtered"),
            flag(_ROW_HANDED).alias("handed"),
            F.max(F.when(kind != _ROW_ENTERED, a)).alias("last_outcome_ms"),
        )
    )
    first_2xx = F.col("first_2xx_ms")
    grouped = per_fact.groupBy(*ORIGIN).agg(
        F.min("minute_ms").alias("minute_ms"),
        F.min("event_time_ms").alias("event_time_ms"),
        F.max("kafka_ms").alias("kafka_ms"),
        F.max("future").alias("future"),
        F.max("after_future").alias("after_future"),
        F.sum("delivered").alias("deliveries"),  # distinct delivered fact ids
        F.min(first_2xx).alias("first_2xx_ms"),
        F.min_by("taken_ms", first_2xx).alias("taken_ms"),
        F.min_by("node", first_2xx).alias("node"),
        F.min_by("reason", "dead_ms").alias("reason"),
        F.max("dead").alias("dead"),
        F.max("filtered").alias("filtered"),
        F.max("handed").alias("handed"),
        F.max("last_outcome_ms").alias("last_outcome_ms"),
    )
    status = (
        F.when(F.col("deliveries") > 0, DELIVERED)
        .when(F.col("dead") == 1, DEAD_LETTERED)
        .when(F.col("filtered") == 1, FILTERED)
        .when(F.col("handed") == 1, IN_RETRY)
        .otherwise(MISSING)
    )
    # as `problem != 'time_future'` of the greatest problem of the origin's entered rows
    future = (F.col("future") > 0) & (F.col("after_future") == 0)
    lag_ok = first_2xx.isNotNull() & ~F.coalesce(future, F.lit(False))
    taken_ok = (
        lag_ok
        & (F.col("taken_ms") > 0)
        & (F.col("event_time_ms") <= F.col("taken_ms") + FUTURE_TOLERANCE_MS)
    )
    return grouped.where(F.col("minute_ms").isNotNull()).select(
        *ORIGIN, "minute_ms", "event_time_ms", "first_2xx_ms", "node", "reason",
        status.alias("status"),
        F.greatest(F.coalesce(F.col("deliveries"), F.lit(0)) - 1, F.lit(0)).alias("duplicates"),
        F.greatest("kafka_ms", "last_outcome_ms").alias("seen_ms"),
        F.when(lag_ok, _clamp(first_2xx - F.col("event_time_ms"))).alias("lag_ms"),
        F.when(taken_ok, F.col("taken_ms") - F.col("event_time_ms")).alias("lag_in_ms"),
        F.when(taken_ok, first_2xx - F.col("taken_ms")).alias("process_ms"),
    )  # fmt: skip


def _clamp(column: Column) -> Column:
    from pyspark.sql import functions as F

    return F.least(F.greatest(column, F.lit(0)), F.lit(LAG_MAX_MS))


# the nearest-rank percentiles computed in one pass: (name, per what, of which value, pcts)
_RANKED = (
    ("lag", "minute_ms", "lag_ms", PERCENTILES),
    ("lag_in", "minute_ms", "lag_in_ms", (95,)),
    ("process", "minute_ms", "process_ms", (95,)),
    ("node", "node", "process_ms", PERCENTILES),
)


def nearest_ranks(per_origin: DataFrame) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Exact nearest-rank percentiles of each `_RANKED` value, per destination and minute (or
    node): counts of each distinct value, a running sum in value order, and the smallest value
    whose running count reaches ceil(pct * n / 100), in integers (cum * 100 >= pct * n).
    Keyed by (name, dest, minute or node code): `n` and `p{pct}`."""
    from functools import reduce

    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    stacked = reduce(
        lambda x, y: x.unionByName(y),
        [
            per_origin.where(F.col(value).isNotNull()).select(
                "dest",
                F.col(key).alias("key"),
                F.lit(i).alias("which"),
                F.col(value).alias("value"),
            )
            for i, (_, key, value, _) in enumerate(_RANKED)
        ],
    )
    keys = ["dest", "key", "which"]
    counted = stacked.groupBy(*keys, "value").count()
    ordered = W.partitionBy(*keys).orderBy("value").rowsBetween(W.unboundedPreceding, W.currentRow)
    ranked = counted.withColumn("cum", F.sum("count").over(ordered)).withColumn(
        "n", F.sum("count").over(W.partitionBy(*keys))
    )
    pcts = sorted({pct for *_, wanted in _RANKED for pct in wanted})
    rows = (
        ranked.groupBy(*keys)
        .agg(
            F.max("n").alias("n"),
            *(
                F.min(F.when(F.col("cum") * 100 >= F.col("n") * pct, F.col("value"))).alias(
                    f"p{pct}"
                )
                for pct in pcts
            ),
        )
        .collect()
    )
    return {(_RANKED[row["which"]][0], row["dest"], row["key"]): row.asDict() for row in rows}


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


def minute_counts(per_origin: DataFrame, on_time: Column, names: Names) -> list[dict[str, Any]]:
    """The count columns per destination and minute, and its dead letters per reason code
    (`dead_{code}`)."""
    from pyspark.sql import functions as F

    status = F.col("status")

    def n(which: Column) -> Column:
        return F.sum(which.cast("long"))

    return [
        row.asDict()
        for row in per_origin.groupBy("dest", "minute_ms")
        .agg(
            F.count(F.lit(1)).alias("entered"),
            *(n(status == i).alias(name) for i, name in enumerate(STATUSES)),
            F.sum("duplicates").alias("duplicates"),
            F.sum(on_time).alias("on_time"),
            F.max("seen_ms").alias("seen_ms_max"),
            *(
                n((status == DEAD_LETTERED) & (F.col("reason") == code)).alias(f"dead_{code}")
                for code in range(len(names.reasons))
            ),
        )
        .collect()
    ]


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
    per_origin = origins(entered, outcomes, codes).where(in_window)
    settled = _settled_minutes(spark, archive, window, dests)
    versions = read_settings(spark, archive)
    found = sorted({v.dest for v in versions} | set(dests or []))
    per_origin = per_origin.persist()
    try:
        counted = minute_counts(per_origin, on_time_expression(versions, found), names)
        if not counted:
            what = f"destination {', '.join(dests)}" if dests else "any destination"
            raise ArchiveInputError(
                f"archive {archive}: no entered rows of {what} in {_span(window)}"
            )
        ranks = nearest_ranks(per_origin)
        missing = _missing(per_origin, entered, sum(int(row["missing"]) for row in counted))
    finally:
        per_origin.unpersist()
    rows, dead_by_reason = _minute_rows(counted, ranks, names)
    nodes = _nodes(ranks, names)
    return finish(rows, dead_by_reason, missing, nodes, versions, settled, lag_sla_s)


def _minute_rows(
    counted: list[dict[str, Any]],
    ranks: dict[tuple[str, str, int], dict[str, Any]],
    names: Names,
) -> tuple[list[dict[str, Any]], dict[tuple[str, int], dict[str, int]]]:
    """The minute rows `finish` takes (counts and percentiles), and the dead letters by reason."""
    rows = []
    dead_by_reason: dict[tuple[str, int], dict[str, int]] = {}
    for row in counted:
        dest, minute_ms = row["dest"], row["minute_ms"]
        by_reason = {
            reason: int(row.pop(f"dead_{code}") or 0) for code, reason in enumerate(names.reasons)
        }
        by_reason = {reason: n for reason, n in by_reason.items() if n}
        if by_reason:
            dead_by_reason[dest, minute_ms] = by_reason
        for name, _, _, pcts in _RANKED[:3]:
            ranked = ranks.get((name, dest, minute_ms), {})
            for pct in pcts:
                row[f"{name}_p{pct}_ms"] = ranked.get(f"p{pct}")
        rows.append(row)
    return rows, dead_by_reason


def _nodes(ranks: dict[tuple[str, str, int], dict[str, Any]], names: Names) -> list[dict[str, Any]]:
    """The lag contribution of each node that delivered: its process duration, exactly."""
    nodes = [
        {
            "dest": dest,
            "node": names.nodes[code],
            "delivered": int(ranked["n"]),
            **{f"process_p{pct}_ms": ranked[f"p{pct}"] for pct in PERCENTILES},
        }
        for (name, dest, code), ranked in ranks.items()
        if name == "node"
    ]
    return sorted(nodes, key=lambda node: (node["dest"], node["node"]))


def _missing(per_origin: DataFrame, entered: DataFrame, count: int) -> Any:
    """The missing events, with their ids from their entered rows (the greatest, as the rows of
    an origin normally agree)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    if count == 0:
        return pa.table({name: pa.array([], type) for name, type in _MISSING_COLUMNS})
    lost = per_origin.where(F.col("status") == MISSING).select(
        "dest", "minute_ms", *ORIGIN[1:], "event_time_ms"
    )
    origins = lost.select(*ORIGIN)
    if count <= _BROADCAST_MISSING_MAX:
        origins = F.broadcast(origins)
    ids = (
        entered.join(origins, ORIGIN, "left_semi")
        .groupBy(*ORIGIN)
        .agg(F.max("event_id").alias("event_id"))
    )
    return (
        lost.join(ids, ORIGIN, "left")
        .select([name for name, _ in _MISSING_COLUMNS])
        .orderBy("dest", "topic", "partition", "offset")
        .toArrow()
    )


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
