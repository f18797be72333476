"""`spark-batch reconcile`: the per-minute loss tables rebuilt from the archive, by event id.

The auditor's live tables are fast and provisional; this recount is the authority. It reads
what the auditor saw enter (`entered` rows) and what every node said became of each event
(`outcomes` rows, one per event per audit fact) and joins them by origin
(`dest/topic/partition/offset`), the key both carry, in one shuffle: both row kinds are
shuffled by origin, outcome rows grouped per fact, then with the entered rows per origin
(`origins`); what the tables need is counted from those in one more aggregation (`tally`).
The rules are the auditor's (`auditor/ledger.py`):

- an origin counts in the minute the auditor filed it under (its `minute_ms`); repeated rows
  (a crash repeats a roll) and repeated facts (same `fact_id`) count once;
- its status is the first of: delivered (any 2xx: a later 2xx wins over a dead letter),
  dead-lettered (the reason of its first dead letter), filtered, in retry (handed off or
  re-offered, nothing final yet), missing (no outcome at all);
- `duplicates` are 2xx facts beyond the first; end-to-end lag is the first 2xx time minus the
  event time, lag-in the time the connector took the event in minus the event time, the
  node's process duration the first 2xx time minus that; percentiles are exact nearest-rank
  (`auditor.percentiles.rank_of`), computed from counts of each distinct value per minute;
- a minute is final when the auditor wrote it as final (its `minutes` rows), or when the
  archive reaches `settle_s` past its end (the newest Kafka timestamp entered or outcome
  time in it), and judged with `auditor.buckets.judge`:
  first deliveries more than `settle_s` after the minute ended are late, as live.

Settings (`settle_s`, `lag_sla_s`) are the versions the auditor wrote beside the rows, per
minute; `--lag-sla-s` overrides the SLA.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from auditor.archive.layout import Kind
from auditor.buckets import MINUTE_MS, Counts, judge
from auditor.ledger import MAX_MISSING_IDS
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


# Entered and outcome rows become fixed-width rows besides the origin (and the fact id), so
# Spark aggregates them in hash maps (a string or a set in an aggregation buffer makes it sort
# every row instead): what a row is goes in the bits of `code`, its times in `a`, `b`, `c`:
#   entered rows:  _ROW_ENTERED and the problem bits; a = minute_ms, b = event_time_ms,
#                  c = kafka_ms
#   outcome rows:  the bit of its outcome, the codes of its reason and node (`Names`);
#                  a = outcome_ms, b = taken_ms
_ROW_ENTERED, _ROW_DELIVERED, _ROW_DEAD, _ROW_FILTERED, _ROW_HANDED, _ROW_OTHER = (
    1, 2, 4, 8, 16, 32,
)  # fmt: skip
_FUTURE = 64  # an entered row whose problem is time_future
_AFTER_FUTURE = 128  # one whose problem sorts after time_future (then max(problem) is not it)
_BITS = 0xFF
_REASON_SHIFT, _REASON_MASK = 8, (1 << 24) - 1
_NODE_SHIFT = 32
_PARTITION_BYTES = 32 * 2**20  # of input per partition of the shuffle by origin
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


def _entered_rows(entered: DataFrame) -> DataFrame:
    """Entered rows as fixed-width rows (see `_ROW_ENTERED`)."""
    from pyspark.sql import functions as F

    problem = F.col("problem")
    flags = F.when(problem == "time_future", _FUTURE).otherwise(0) + F.when(
        problem > "time_future", _AFTER_FUTURE
    ).otherwise(0)
    return entered.select(
        *ORIGIN, (F.lit(_ROW_ENTERED) + flags).cast("long").alias("code"),
        F.col("minute_ms").alias("a"), F.col("event_time_ms").alias("b"),
        F.col("kafka_ms").alias("c"),
    )  # fmt: skip


def _outcome_rows(outcomes: DataFrame, codes: DataFrame) -> DataFrame:
    """Outcome rows as fixed-width rows and their fact id (see `_ROW_ENTERED`)."""
    from pyspark.sql import functions as F

    outcome = F.col("outcome")
    kind = (
        F.when(outcome == str(Outcome.DELIVERED), _ROW_DELIVERED)
        .when(outcome == str(Outcome.DEAD_LETTERED), _ROW_DEAD)
        .when(outcome == str(Outcome.FILTERED), _ROW_FILTERED)
        .when(outcome.isin(*_HANDED), _ROW_HANDED)
        .otherwise(_ROW_OTHER)
    )
    named = outcomes.withColumn("reason_key", _reason_key()).join(codes, ["node", "reason_key"])
    return named.select(
        *ORIGIN, "fact_id", (F.col("named") + kind).alias("code"),
        F.col("outcome_ms").alias("a"), F.col("taken_ms").alias("b"),
    )  # fmt: skip


def shuffle_partitions(spark: SparkSession, *frames: DataFrame) -> int:
    """Partitions for the shuffle by origin: one per `_PARTITION_BYTES` of input (Spark's
    estimate, after pruning), so that a task's hash maps stay in memory (fewer make the
    aggregations after it cheaper), rounded up to a multiple of the default parallelism (no
    core idle in the last wave); at least the session's `spark.sql.shuffle.partitions`."""
    least = int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
    try:
        size = sum(
            int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
            for frame in frames
        )
    except Exception:  # an estimate only: without it, the session's number
        return least
    wave = max(1, spark.sparkContext.defaultParallelism)
    return max(least, -(-size // _PARTITION_BYTES // wave) * wave)


def origins(
    entered: DataFrame, outcomes: DataFrame | None, codes: DataFrame | None, partitions: int
) -> DataFrame:
    """One row per origin that entered: where it counts and what became of it.

    Entered and outcome rows are shuffled by origin into the same `partitions`, so what
    follows needs no other exchange: outcome rows are grouped per origin and fact (a fact
    archived twice counts once: its rows are the same), then, with the entered rows, per
    origin.
    """
    from pyspark.sql import functions as F

    rows = _entered_rows(entered).repartition(partitions, *ORIGIN)
    if outcomes is not None and codes is not None:
        facts = (
            _outcome_rows(outcomes, codes)
            .repartition(partitions, *ORIGIN)
            .groupBy(*ORIGIN, "fact_id", "code")
            .agg(F.min("a").alias("a"), F.min("b").alias("b"))
            .select(*ORIGIN, "code", "a", "b", F.lit(None).cast("long").alias("c"))
        )
        rows = rows.unionByName(facts)
    code, a, b = F.col("code"), F.col("a"), F.col("b")

    def of(bit: int, column: Column) -> Column:
        return F.when(code.bitwiseAND(bit) != 0, column)

    first_at = of(_ROW_DELIVERED, a)
    grouped = rows.groupBy(*ORIGIN).agg(
        F.min(of(_ROW_ENTERED, a)).alias("minute_ms"),
        F.min(of(_ROW_ENTERED, b)).alias("event_time_ms"),
        F.max("c").alias("kafka_ms"),
        F.bit_or(code.bitwiseAND(_BITS)).alias("flags"),
        F.count(first_at).alias("deliveries"),  # distinct delivered facts
        F.min(first_at).alias("first_2xx_ms"),
        F.min_by(of(_ROW_DELIVERED, b), first_at).alias("taken_ms"),
        F.min_by(of(_ROW_DELIVERED, F.shiftright(code, _NODE_SHIFT)), first_at).alias("node"),
        F.min_by(
            of(_ROW_DEAD, F.shiftright(code, _REASON_SHIFT).bitwiseAND(_REASON_MASK)),
            of(_ROW_DEAD, a),
        ).alias("reason"),
        F.max(F.when(code.bitwiseAND(_ROW_ENTERED) == 0, a)).alias("last_outcome_ms"),
    )
    flags = F.col("flags")

    def has(bit: int) -> Column:
        return flags.bitwiseAND(bit) != 0

    first_2xx = F.col("first_2xx_ms")
    status = (
        F.when(F.col("deliveries") > 0, DELIVERED)
        .when(has(_ROW_DEAD), DEAD_LETTERED)
        .when(has(_ROW_FILTERED), FILTERED)
        .when(has(_ROW_HANDED), IN_RETRY)
        .otherwise(MISSING)
    )
    # as `problem != 'time_future'` of the greatest problem of the origin's entered rows
    lag_ok = first_2xx.isNotNull() & ~(has(_FUTURE) & ~has(_AFTER_FUTURE))
    taken_ok = (
        lag_ok
        & (F.col("taken_ms") > 0)
        & (F.col("event_time_ms") <= F.col("taken_ms") + FUTURE_TOLERANCE_MS)
    )
    return grouped.where(F.col("minute_ms").isNotNull()).select(
        *ORIGIN, "minute_ms", "event_time_ms", "first_2xx_ms", "node", "reason",
        status.alias("status"),
        F.greatest(F.col("deliveries") - 1, F.lit(0)).alias("duplicates"),
        F.greatest("kafka_ms", "last_outcome_ms").alias("seen_ms"),
        F.when(lag_ok, _clamp(first_2xx - F.col("event_time_ms"))).alias("lag_ms"),
        F.when(taken_ok, F.col("taken_ms") - F.col("event_time_ms")).alias("lag_in_ms"),
        F.when(taken_ok, first_2xx - F.col("taken_ms")).alias("process_ms"),
    )  # fmt: skip


def _clamp(column: Column) -> Column:
    from pyspark.sql import functions as F

    return F.least(F.greatest(column, F.lit(0)), F.lit(LAG_MAX_MS))


# What each row of the one aggregation after the per-origin rows stands for (`tally`): an
# origin's status (its value: the status, and for a dead letter the reason's code too), a lag
# value of a minute, a process duration of a node, a missing origin (partition, offset, topic).
_W_STATUS, _W_LAG, _W_LAG_IN, _W_PROCESS, _W_NODE, _W_MISSING = range(6)
# the exact nearest-rank percentiles, of values counted per (dest, which, key)
_RANKED = {
    _W_LAG: ("lag", PERCENTILES),
    _W_LAG_IN: ("lag_in", (95,)),
    _W_PROCESS: ("process", (95,)),
    _W_NODE: ("process", PERCENTILES),  # per node, not per minute
}
_DEAD_REASON = 8  # a dead letter's status value: DEAD_LETTERED + 8 * (1 + its reason's code)


def tally(per_origin: DataFrame, on_time: Column) -> Any:
    """Everything the tables need from the per-origin rows, in one job and without caching
    them: each origin becomes a few rows (`_W_STATUS` ...), counted per (dest, which, key,
    topic, value) with its duplicates, on-time first deliveries and latest time; the lag
    values then get their exact nearest-rank percentiles per (dest, which, key): a running
    sum of the counts in value order, and the smallest value whose running count reaches
    ceil(pct * n / 100), in integers (cum * 100 >= pct * n). An Arrow table: a row per
    status value and minute, and per missing origin, as counted (`n`, and `sum_a`, `sum_b`,
    `max_c` as the stack below says), and a row per ranked (dest, which, key) with `n` (how
    many values) and `p{pct}`.
    """
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    status = F.col("status")
    prepared = per_origin.select(
        "dest", "topic", "partition", "offset", "minute_ms", "event_time_ms", "node",
        "lag_ms", "lag_in_ms", "process_ms", "duplicates", "seen_ms",
        F.when(status == DEAD_LETTERED, status + _DEAD_REASON * (F.col("reason") + 1))
        .otherwise(status).cast("long").alias("status_value"),
        on_time.cast("long").alias("on_time"),
        F.when(status == MISSING, F.col("offset")).alias("missing_offset"),
    )  # fmt: skip
    # beside the count, three sums or maxima per counted row: of a status row, its duplicates,
    # on-time first deliveries and latest time; of a missing origin (a group of one), its
    # minute and event time; nothing for a lag value
    none, no_topic = "CAST(NULL AS BIGINT)", "CAST(NULL AS STRING)"
    counted_only = f"{no_topic}, {none}, {none}, {none}"
    stacked = prepared.select(
        "dest",
        F.expr(
            f"stack(6,"
            f" {_W_STATUS}, minute_ms, status_value, {no_topic}, duplicates, on_time, seen_ms,"
            f" {_W_LAG}, minute_ms, lag_ms, {counted_only},"
            f" {_W_LAG_IN}, minute_ms, lag_in_ms, {counted_only},"
            f" {_W_PROCESS}, minute_ms, process_ms, {counted_only},"
            f" {_W_NODE}, node, process_ms, {counted_only},"
            f" {_W_MISSING}, CAST(partition AS BIGINT), missing_offset, topic, minute_ms,"
            f" event_time_ms, {none}"
            f") AS (which, key, value, topic, sum_a, sum_b, max_c)"
        ),
    ).where(F.col("value").isNotNull())
    counted = stacked.groupBy("dest", "which", "key", "topic", "value").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("sum_a").alias("sum_a"),
        F.sum("sum_b").alias("sum_b"),
        F.max("max_c").alias("max_c"),
    )
    # one pipeline from `counted` (two branches would each repeat everything before it): the
    # window runs over every counted row, then status and missing rows stay as they are (one
    # group each: `single` is their value) and ranked rows become one per (dest, which, key)
    pcts = sorted({pct for _, wanted in _RANKED.values() for pct in wanted})
    keys = ["dest", "which", "key"]
    ordered = W.partitionBy(*keys).orderBy("value").rowsBetween(W.unboundedPreceding, W.currentRow)
    ranked = F.col("which").isin(*_RANKED)
    cum, total, value = F.col("cum"), F.col("total"), F.col("value")
    return (
        counted.withColumn("cum", F.sum("n").over(ordered))
        .withColumn("total", F.sum("n").over(W.partitionBy(*keys)))
        .withColumn("single", F.when(~ranked, value))
        .groupBy(*keys, "topic", "single")
        .agg(
            F.max(F.when(ranked, total).otherwise(F.col("n"))).alias("n"),
            F.max(F.when(~ranked, value)).alias("value"),
            F.sum("sum_a").alias("sum_a"),
            F.sum("sum_b").alias("sum_b"),
            F.max("max_c").alias("max_c"),
            *(
                F.min(F.when(ranked & (cum * 100 >= total * pct), value)).alias(f"p{pct}")
                for pct in pcts
            ),
        )
        .toArrow()
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
    per_origin = origins(entered, outcomes, codes, partitions).where(in_window)
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
        if counted["which"] == _W_STATUS:
            dest, minute_ms = counted["dest"], counted["key"]
            row = minutes.get((dest, minute_ms)) or minutes.setdefault(
                (dest, minute_ms), _empty_minute(dest, minute_ms)
            )
            n, value = int(counted["n"]), int(counted["value"])
            row["entered"] += n
            row[STATUSES[value % _DEAD_REASON]] += n
            if value >= _DEAD_REASON:
                dead_by_reason[dest, minute_ms][names.reasons[value // _DEAD_REASON - 1]] = n
            row["duplicates"] += int(counted["sum_a"] or 0)
            row["on_time"] += int(counted["sum_b"] or 0)
            row["seen_ms_max"] = max(row["seen_ms_max"] or 0, counted["max_c"] or 0)
    for counted in tallied:
        ranked = _RANKED.get(counted["which"])
        found = minutes.get((counted["dest"], counted["key"]))
        if ranked is not None and counted["which"] != _W_NODE and found is not None:
            name, pcts = ranked
            for pct in pcts:
                found[f"{name}_p{pct}_ms"] = counted[f"p{pct}"]
    lost = [counted for counted in tallied if counted["which"] == _W_MISSING]
    return list(minutes.values()), dict(dead_by_reason), lost


def _empty_minute(dest: str, minute_ms: int) -> dict[str, Any]:
    return {
        "dest": dest, "minute_ms": minute_ms, "entered": 0, **dict.fromkeys(STATUSES, 0),
        "duplicates": 0, "on_time": 0, "seen_ms_max": None,
        **{
            f"{name}_p{pct}_ms": None
            for which, (name, pcts) in _RANKED.items()
            if which != _W_NODE
            for pct in pcts
        },
    }  # fmt: skip


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
        if row["which"] == _W_NODE
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
        (row["dest"], row["topic"], int(row["key"]), int(row["value"]), row["sum_a"],
         row["sum_b"])
        for row in lost
    )  # fmt: skip
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
