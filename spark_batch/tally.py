"""The reconciliation's one aggregation: per-origin rows counted per minute and status, lags ranked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from config.destination import Accounting
from hifi.accounting.buckets import MINUTE_MS
from spark_batch.archive_input import SettingsVersion

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
from spark_batch.origins import DEAD_LETTERED, MISSING

PERCENTILES = (50, 95, 99)
# What each row of the one aggregation after the per-origin rows stands for (`tally`): an
# origin's status (its value: the status, and for a dead letter the reason's code too), a lag
# value of a minute, a process duration of a node, a missing origin (partition, offset, topic).
WHICH_STATUS, WHICH_LAG, WHICH_LAG_IN, WHICH_PROCESS, WHICH_NODE, WHICH_MISSING = range(6)
# the exact nearest-rank percentiles, of values counted per (dest, which, key)
RANKED = {
    WHICH_LAG: ("lag", PERCENTILES),
    WHICH_LAG_IN: ("lag_in", (95,)),
    WHICH_PROCESS: ("process", (95,)),
    WHICH_NODE: ("process", PERCENTILES),  # per node, not per minute
}
DEAD_REASON = 8  # a dead letter's status: DEAD_LETTERED + 8 * (1 + its reason's code)
# a status row's value: MEMBERS * its status (as above) + its membership (`origins.ENTERED`,
# `origins.ACCEPTED`: 1, 2 or both)
MEMBERS = 4


def tally(per_origin: DataFrame, on_time: Column) -> Any:
    """Everything the tables need from the per-origin rows, in one job and without caching
    them: each origin becomes a few rows (`WHICH_STATUS` ...), counted per (dest, which, key,
    topic, value) with its duplicates, on-time first deliveries and latest time; the lag
    values then get their exact nearest-rank percentiles per (dest, which, key): a running
    sum of the counts in value order, and the smallest value whose running count reaches
    ceil(pct * n / 100), in integers (cum * 100 >= pct * n). An Arrow table: a row per
    status value and minute, and per missing origin, as counted (`n`, and
    `duplicates_or_minute_ms`, `on_time_or_event_time_ms`, `seen_ms_max`: a status row's
    duplicates, on-time first deliveries and latest time; a missing origin's minute and event
    time), and a row per ranked (dest, which, key) with `n` (how many values) and `p{pct}`.
    """
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    stacked = _stacked(per_origin, on_time)
    counted = stacked.groupBy("dest", "which", "key", "topic", "value").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("duplicates_or_minute_ms").alias("duplicates_or_minute_ms"),
        F.sum("on_time_or_event_time_ms").alias("on_time_or_event_time_ms"),
        F.max("seen_ms_max").alias("seen_ms_max"),
    )
    # one pipeline from `counted` (two branches would each repeat everything before it): the
    # window runs over every counted row, then status and missing rows stay as they are (one
    # group each: `single` is their value) and ranked rows become one per (dest, which, key)
    pcts = sorted({pct for _, wanted in RANKED.values() for pct in wanted})
    keys = ["dest", "which", "key"]
    ordered = W.partitionBy(*keys).orderBy("value").rowsBetween(W.unboundedPreceding, W.currentRow)
    ranked = F.col("which").isin(*RANKED)
    cum, total, value = F.col("cum"), F.col("total"), F.col("value")
    return (
        counted.withColumn("cum", F.sum("n").over(ordered))
        .withColumn("total", F.sum("n").over(W.partitionBy(*keys)))
        .withColumn("single", F.when(~ranked, value))
        .groupBy(*keys, "topic", "single")
        .agg(
            F.max(F.when(ranked, total).otherwise(F.col("n"))).alias("n"),
            F.max(F.when(~ranked, value)).alias("value"),
            F.sum("duplicates_or_minute_ms").alias("duplicates_or_minute_ms"),
            F.sum("on_time_or_event_time_ms").alias("on_time_or_event_time_ms"),
            F.max("seen_ms_max").alias("seen_ms_max"),
            *(
                F.min(F.when(ranked & (cum * 100 >= total * pct), value)).alias(f"p{pct}")
                for pct in pcts
            ),
        )
        .toArrow()
    )


def _stacked(per_origin: DataFrame, on_time: Column) -> DataFrame:
    """Each origin as a few rows (`WHICH_STATUS` ...): (dest, which, key, value, topic) and
    the three sums or maxima counted beside it."""
    from pyspark.sql import functions as F

    status = F.col("status")
    prepared = per_origin.select(
        "dest",
        "topic",
        "partition",
        "offset",
        "minute_ms",
        "event_time_ms",
        "node",
        "lag_ms",
        "lag_in_ms",
        "process_ms",
        "duplicates",
        "seen_ms",
        (
            F.when(status == DEAD_LETTERED, status + DEAD_REASON * (F.col("reason") + 1))
            .otherwise(status)
            .cast("long")
            * MEMBERS
            + F.col("member")
        ).alias("status_value"),
        on_time.cast("long").alias("on_time"),
        F.when(status == MISSING, F.col("offset")).alias("missing_offset"),
    )
    # beside the count, three sums or maxima per counted row: of a status row, its duplicates,
    # on-time first deliveries and latest time; of a missing origin (a group of one), its
    # minute and event time; nothing for a lag value
    none, no_topic = "CAST(NULL AS BIGINT)", "CAST(NULL AS STRING)"
    counted_only = f"{no_topic}, {none}, {none}, {none}"
    return prepared.select(
        "dest",
        F.expr(
            f"stack(6,"
            f" {WHICH_STATUS}, minute_ms, status_value, {no_topic}, duplicates, on_time, seen_ms,"
            f" {WHICH_LAG}, minute_ms, lag_ms, {counted_only},"
            f" {WHICH_LAG_IN}, minute_ms, lag_in_ms, {counted_only},"
            f" {WHICH_PROCESS}, minute_ms, process_ms, {counted_only},"
            f" {WHICH_NODE}, node, process_ms, {counted_only},"
            f" {WHICH_MISSING}, CAST(partition AS BIGINT), missing_offset, topic, minute_ms,"
            f" event_time_ms, {none}"
            f") AS (which, key, value, topic,"
            f" duplicates_or_minute_ms, on_time_or_event_time_ms, seen_ms_max)"
        ),
    ).where(F.col("value").isNotNull())


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
