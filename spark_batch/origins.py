"""The reconciliation's join by origin: one row per origin entered or accepted, where it counts and its fate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hifi.accounting.archive_layout import Kind
from hifi.accounting.buckets import MINUTE_MS
from hifi.vocabulary import Outcome
from spark_batch.archive_input import ArchiveInputError, Window, read_rows

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


ORIGIN = ["dest", "topic", "partition", "offset"]
LAG_MAX_MS = 2**31 - 1  # as the ledger clamps
FUTURE_TOLERANCE_MS = 60_000
_HANDED = (str(Outcome.HANDED_OFF), str(Outcome.RE_OFFERED))

# Entered and outcome rows become fixed-width rows besides the origin (and the fact id), so
# Spark aggregates them in hash maps (a string or a set in an aggregation buffer makes it sort
# every row instead): what a row is goes in the bits of `code`, its times in three columns:
#   entered rows:  _ROW_ENTERED and the problem bits; `minute_or_outcome_ms` = minute_ms,
#                  `event_or_taken_ms` = event_time_ms, `kafka_ms`
#   outcome rows:  the bit of its outcome, the codes of its reason and node (`Names`);
#                  `minute_or_outcome_ms` = outcome_ms, `event_or_taken_ms` = taken_ms,
#                  `kafka_ms` null
#   and besides, of an accepted row that counts (`_ROW_ACCEPTED`, `accepted_rules`): the
#   minute an entry of it would count in and its event time (null for every other row)
_MINUTE_OR_OUTCOME, _EVENT_OR_TAKEN = "minute_or_outcome_ms", "event_or_taken_ms"
_ROW_ENTERED, _ROW_DELIVERED, _ROW_DEAD, _ROW_FILTERED, _ROW_HANDED, _ROW_OTHER = (
    1,
    2,
    4,
    8,
    16,
    32,
)
_FUTURE = 64  # an entered row whose problem is time_future
_AFTER_FUTURE = 128  # one whose problem sorts after time_future (then max(problem) is not it)
_ROW_ACCEPTED = 256  # an accepted row at or after the first offset its partition entered at
_BITS = 0x1FF
_REASON_SHIFT, _REASON_MASK = 9, (1 << 23) - 1
_ACCEPTED_MINUTE, _ACCEPTED_EVENT = "accepted_minute_ms", "accepted_event_ms"
_NODE_SHIFT = 32
_PARTITION_BYTES = 32 * 2**20  # of input per partition of the shuffle by origin
# an origin's status, by the auditor's precedence
STATUSES = ("delivered", "dead_lettered", "filtered", "in_retry", "missing")
DELIVERED, DEAD_LETTERED, FILTERED, IN_RETRY, MISSING = range(len(STATUSES))
# an origin's membership (`member`): entered, accepted (by the ingest service), or both
ENTERED, ACCEPTED = 1, 2
_UNKNOWN_REASON = "unknown"


@dataclass(frozen=True)
class Names:
    """The node names and dead-letter reasons of the outcome rows, by the codes the rows carry
    (a reason code names `coalesce(reason, 'unknown')`)."""

    nodes: list[str]
    reasons: list[str]
    accepting: bool = False  # whether any row is an accepted one (the ingest service's)


def names_of(spark: SparkSession, outcomes: DataFrame | None) -> tuple[Names, DataFrame | None]:
    """The distinct nodes and reasons of `outcomes` (a small aggregation), and a table of
    (node, reason_key, named): the code bits of each pair, for a broadcast join."""
    from pyspark.sql import functions as F

    if outcomes is None:
        return Names([], []), None
    pairs = (
        outcomes.groupBy("node", _reason_key().alias("reason_key"))
        .agg(F.max(F.col("outcome") == str(Outcome.ACCEPTED)).alias("accepted"))
        .collect()
    )
    nodes = sorted({row["node"] for row in pairs})
    reasons = sorted({row["reason_key"] for row in pairs})
    node_code = {name: i for i, name in enumerate(nodes)}
    reason_code = {name: i for i, name in enumerate(reasons)}
    if len(reasons) > _REASON_MASK:
        raise ArchiveInputError(f"the outcome rows name {len(reasons):,} reasons: too many")
    codes = spark.createDataFrame(
        [
            (
                row["node"],
                row["reason_key"],
                node_code[row["node"]] << _NODE_SHIFT
                | reason_code[row["reason_key"]] << _REASON_SHIFT,
            )
            for row in pairs
        ],
        "node string, reason_key string, named long",
    )
    accepting = any(row["accepted"] for row in pairs)
    return Names(nodes, reasons, accepting), F.broadcast(codes)


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
        *ORIGIN,
        (F.lit(_ROW_ENTERED) + flags).cast("long").alias("code"),
        F.col("minute_ms").alias(_MINUTE_OR_OUTCOME),
        F.col("event_time_ms").alias(_EVENT_OR_TAKEN),
        "kafka_ms",
        F.lit(None).cast("long").alias(_ACCEPTED_MINUTE),
        F.lit(None).cast("long").alias(_ACCEPTED_EVENT),
    )


def _outcome_rows(
    outcomes: DataFrame, codes: DataFrame, first_offsets: DataFrame | None
) -> DataFrame:
    """Outcome rows as fixed-width rows and their fact id (see `_ROW_ENTERED`). Accepted rows
    count (`_ROW_ACCEPTED`) only with `first_offsets` (`first_offsets`), at or after the first
    offset their partition entered at; the others are as any outcome the tables do not count."""
    from pyspark.sql import functions as F

    outcome = F.col("outcome")
    no_time = F.lit(None).cast("long")
    accepted_minute, accepted_event = no_time, no_time
    kind = (
        F.when(outcome == str(Outcome.DELIVERED), _ROW_DELIVERED)
        .when(outcome == str(Outcome.DEAD_LETTERED), _ROW_DEAD)
        .when(outcome == str(Outcome.FILTERED), _ROW_FILTERED)
        .when(outcome.isin(*_HANDED), _ROW_HANDED)
    )
    if first_offsets is not None:
        outcomes = outcomes.join(first_offsets, ["dest", "topic", "partition"], "left")
        counts = (outcome == str(Outcome.ACCEPTED)) & (F.col("offset") >= F.col("first_offset"))
        kind = kind.when(counts, _ROW_ACCEPTED)
        accepted_minute = F.when(counts, _minute_of_entry())
        accepted_event = F.when(counts, F.col("event_time_ms"))
    named = outcomes.withColumn("reason_key", _reason_key()).join(codes, ["node", "reason_key"])
    return named.select(
        *ORIGIN,
        "fact_id",
        (F.col("named") + kind.otherwise(_ROW_OTHER)).alias("code"),
        F.col("outcome_ms").alias(_MINUTE_OR_OUTCOME),
        F.col("taken_ms").alias(_EVENT_OR_TAKEN),
        accepted_minute.alias(_ACCEPTED_MINUTE),
        accepted_event.alias(_ACCEPTED_EVENT),
    )


def _minute_of_entry() -> Column:
    """The minute an accepted event never seen entering counts in: as an entry's
    (`Ledger.bucket_for_entry`), the arrival time (`taken_ms`) standing in for the Kafka
    timestamp: that of its event time, or of its arrival when the event time is over
    `FUTURE_TOLERANCE_MS` after it (time_future). The auditor's time_past rule depends on
    what it had settled while reading, which the archive does not say: not applied."""
    from pyspark.sql import functions as F

    event_ms = F.col("event_time_ms")
    taken = F.col("taken_ms")
    at_ms = F.when(taken > 0, taken).otherwise(event_ms)
    at = F.when(event_ms > at_ms + FUTURE_TOLERANCE_MS, at_ms).otherwise(event_ms)
    return at - F.pmod(at, F.lit(MINUTE_MS))


def first_offsets(spark: SparkSession, archive: str, dests: list[str] | None) -> DataFrame | None:
    """Per (dest, topic, partition), the first offset seen entering (`first_offset`), from the
    entered rows of every date: accepted events before it, and those of a partition never seen
    entering, cannot be judged and are not counted (`hifi/accounting/accepted.py`)."""
    from pyspark.sql import functions as F

    everywhere = read_rows(spark, archive, Kind.ENTERED, ORIGIN, Window(0, 1), dests, any_date=True)
    if everywhere is None:
        return None
    firsts = everywhere.groupBy("dest", "topic", "partition").agg(
        F.min("offset").alias("first_offset")
    )
    return F.broadcast(firsts)


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
    entered: DataFrame,
    outcomes: DataFrame | None,
    codes: DataFrame | None,
    partitions: int,
    first_offsets: DataFrame | None = None,
) -> DataFrame:
    """One row per origin that entered, or was accepted (with `first_offsets`, at or after
    the first offset of its partition seen entering): where it counts and what became of it.

    Entered and outcome rows are shuffled by origin into the same `partitions`, so what
    follows needs no other exchange: outcome rows are grouped per origin and fact (a fact
    archived twice counts once: its rows are the same), then, with the entered rows, per
    origin.
    """
    from pyspark.sql import functions as F

    rows = _entered_rows(entered).repartition(partitions, *ORIGIN)
    if outcomes is not None and codes is not None:
        facts = (
            _outcome_rows(outcomes, codes, first_offsets)
            .repartition(partitions, *ORIGIN)
            .groupBy(*ORIGIN, "fact_id", "code")
            .agg(
                F.min(_MINUTE_OR_OUTCOME).alias(_MINUTE_OR_OUTCOME),
                F.min(_EVENT_OR_TAKEN).alias(_EVENT_OR_TAKEN),
                F.min(_ACCEPTED_MINUTE).alias(_ACCEPTED_MINUTE),
                F.min(_ACCEPTED_EVENT).alias(_ACCEPTED_EVENT),
            )
            .select(
                *ORIGIN,
                "code",
                _MINUTE_OR_OUTCOME,
                _EVENT_OR_TAKEN,
                F.lit(None).cast("long").alias("kafka_ms"),
                _ACCEPTED_MINUTE,
                _ACCEPTED_EVENT,
            )
        )
        rows = rows.unionByName(facts)
    code, minute_or_outcome, event_or_taken = (
        F.col("code"),
        F.col(_MINUTE_OR_OUTCOME),
        F.col(_EVENT_OR_TAKEN),
    )

    def of(bit: int, column: Column) -> Column:
        return F.when(code.bitwiseAND(bit) != 0, column)

    first_at = of(_ROW_DELIVERED, minute_or_outcome)
    grouped = rows.groupBy(*ORIGIN).agg(
        F.min(of(_ROW_ENTERED, minute_or_outcome)).alias("minute_ms"),
        F.min(of(_ROW_ENTERED, event_or_taken)).alias("event_time_ms"),
        F.max("kafka_ms").alias("kafka_ms"),
        F.bit_or(code.bitwiseAND(_BITS)).alias("flags"),
        F.count(first_at).alias("deliveries"),  # distinct delivered facts
        F.min(first_at).alias("first_2xx_ms"),
        F.min_by(of(_ROW_DELIVERED, event_or_taken), first_at).alias("taken_ms"),
        F.min_by(of(_ROW_DELIVERED, F.shiftright(code, _NODE_SHIFT)), first_at).alias("node"),
        F.min_by(
            of(_ROW_DEAD, F.shiftright(code, _REASON_SHIFT).bitwiseAND(_REASON_MASK)),
            of(_ROW_DEAD, minute_or_outcome),
        ).alias("reason"),
        F.max(F.when(code.bitwiseAND(_ROW_ENTERED) == 0, minute_or_outcome)).alias(
            "last_outcome_ms"
        ),
        F.min(_ACCEPTED_MINUTE).alias(_ACCEPTED_MINUTE),
        F.min(_ACCEPTED_EVENT).alias(_ACCEPTED_EVENT),
    )
    return _fates(grouped)


def _fates(grouped: DataFrame) -> DataFrame:
    """Per origin, from its grouped rows: its status, duplicates, latest time and lags."""
    from pyspark.sql import functions as F

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
    # an origin counts when it entered (in the minute of its entry), or when it was accepted
    # (never seen entering: in the minute an entry of it would count in)
    member = F.when(has(_ROW_ENTERED), ENTERED).otherwise(0) + F.when(
        has(_ROW_ACCEPTED), ACCEPTED
    ).otherwise(0)
    placed = grouped.withColumns(
        {
            "minute_ms": F.coalesce("minute_ms", _ACCEPTED_MINUTE),
            "event_time_ms": F.coalesce("event_time_ms", _ACCEPTED_EVENT),
        }
    )
    return placed.where(F.col("minute_ms").isNotNull()).select(
        *ORIGIN,
        "minute_ms",
        "event_time_ms",
        member.alias("member"),
        "first_2xx_ms",
        "node",
        "reason",
        status.alias("status"),
        F.greatest(F.col("deliveries") - 1, F.lit(0)).alias("duplicates"),
        F.greatest("kafka_ms", "last_outcome_ms").alias("seen_ms"),
        F.when(lag_ok, _clamp(first_2xx - F.col("event_time_ms"))).alias("lag_ms"),
        F.when(taken_ok, F.col("taken_ms") - F.col("event_time_ms")).alias("lag_in_ms"),
        F.when(taken_ok, first_2xx - F.col("taken_ms")).alias("process_ms"),
    )


def _clamp(column: Column) -> Column:
    from pyspark.sql import functions as F

    return F.least(F.greatest(column, F.lit(0)), F.lit(LAG_MAX_MS))
