"""The auditor's archive as Spark DataFrames: entered rows, outcome rows, settings versions.

Paths go to Spark as they are (a local directory, `hdfs://`, `s3a://`), so the same job runs
under `spark-submit` on a cluster. Only the columns a reconciliation needs are read, and only
the `dest=`/`date=` directories of the range (Hive partition pruning). The layout is
`hifi/accounting/archive_layout.py`'s; `docs/accounting.md` ("The archive") describes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from config.destination import Accounting
from hifi.accounting.archive_layout import LATER_COLUMNS, Kind
from hifi.accounting.incarnations import SEPARATOR
from hifi.errors import HifiError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ENTERED_COLUMNS = [
    "dest",
    "minute_ms",
    "topic",
    "partition",
    "offset",
    "event_id",
    "event_time_ms",
    "kafka_ms",
    "problem",
]
OUTCOME_COLUMNS = [
    "dest",
    "fact_id",
    "node",
    "outcome",
    "reason",
    "outcome_ms",
    "topic",
    "partition",
    "offset",
    "event_time_ms",  # read only for accepted rows (Spark prunes it otherwise)
    "taken_ms",
]
_DAY = timedelta(days=1)


class ArchiveInputError(HifiError):
    """The archive cannot be reconciled as asked; the message names the path and the problem."""


@dataclass(frozen=True)
class Window:
    """The event-time range to reconcile: minutes in [from_ms, to_ms)."""

    from_ms: int
    to_ms: int

    def dates(self) -> list[str]:
        """The `date=` partitions that can hold its rows (UTC dates of its minutes)."""
        first = datetime.fromtimestamp(self.from_ms / 1000, UTC).date()
        last = datetime.fromtimestamp((self.to_ms - 1) / 1000, UTC).date()
        days, day = [], first
        while day <= last:
            days.append(day.isoformat())
            day += _DAY
        return days


@dataclass(frozen=True)
class SettingsVersion:
    """A destination's accounting settings from `from_ms` on, as the auditor wrote them."""

    dest: str
    from_ms: int
    settings: Accounting


def _dataset(root: str, kind: Kind) -> str:
    return f"{root.rstrip('/')}/{kind}"


def _is_missing_path(exc: Exception) -> bool:
    text = str(exc)
    return "PATH_NOT_FOUND" in text or "Path does not exist" in text


def read_rows(
    spark: SparkSession,
    root: str,
    kind: Kind,
    columns: list[str],
    window: Window,
    dests: list[str] | None,
    *,
    any_date: bool = False,
) -> DataFrame | None:
    """One dataset's rows of the window's dates (every date with `any_date`) and `dests`,
    or None when it has none.

    `topic` names the origin's incarnation (`hifi.accounting.incarnations`): `orders` in epoch 0 (and
    in files written before `topic_epoch`), `orders@1` after one re-creation, so a join on the
    origin never matches an event of one incarnation with another's."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    path = _dataset(root, kind)
    if not exists(spark, path):
        return None
    try:
        frame = spark.read.option("basePath", path).option("mergeSchema", "true").parquet(path)
    except AnalysisException as exc:
        if _is_missing_path(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return None
        raise ArchiveInputError(f"archive {path}: cannot be read: {_first_line(exc)}") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ArchiveInputError(
            f"archive {path}: not an archive of {kind} rows (no column {', '.join(missing)})"
        )
    if not any_date:
        frame = frame.where(F.col("date").isin(window.dates()))
    if dests:
        frame = frame.where(F.col("dest").isin(dests))
    if "topic" in columns:
        epoch = (
            F.coalesce(F.col("topic_epoch"), F.lit(LATER_COLUMNS["topic_epoch"]))
            if "topic_epoch" in frame.columns
            else F.lit(LATER_COLUMNS["topic_epoch"])
        )
        keyed = F.when(epoch == 0, F.col("topic")).otherwise(
            F.concat(F.col("topic"), F.lit(SEPARATOR), epoch.cast("string"))
        )
        frame = frame.withColumn("topic", keyed)
    return frame.select(*columns)


def read_settings(spark: SparkSession, root: str) -> list[SettingsVersion]:
    """Every settings version of every destination in the archive, oldest first per dest."""
    from pyspark.errors import AnalysisException

    path = f"{root.rstrip('/')}/settings"
    if not exists(spark, path):
        return []
    try:  # whole files as text, parsed here: one small job, no schema inference
        rows = spark.read.option("basePath", path).text(path, wholetext=True).collect()
    except AnalysisException as exc:
        if _is_missing_path(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return []
        raise ArchiveInputError(f"archive {path}: cannot be read: {_first_line(exc)}") from None
    versions = []
    for row in rows:
        found = row.asDict()
        try:
            values = msgspec.json.decode(found["value"], type=dict[str, Any])
            values["dest"] = found.get("dest")
            settings = Accounting(**(values.get("settings") or {}))
            versions.append(SettingsVersion(str(values["dest"]), int(values["from_ms"]), settings))
        except (KeyError, TypeError, ValueError, AttributeError, msgspec.MsgspecError) as exc:
            raise ArchiveInputError(
                f"archive {path}: a settings version of {found.get('dest')!r} is not valid:"
                f" {_first_line(exc)}"
            ) from None
    return sorted(versions, key=lambda v: (v.dest, v.from_ms))


def exists(spark: SparkSession, path: str) -> bool:
    """Whether `path` exists, asked of its Hadoop file system (local, hdfs://, s3a://): cheaper
    than letting a read fail."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return bool(hadoop_path.getFileSystem(conf).exists(hadoop_path))


def settings_at(versions: list[SettingsVersion], dest: str, minute_ms: int) -> Accounting:
    """The settings in force for `dest` at `minute_ms` (the first version before the first
    one's time; the defaults when the auditor wrote none)."""
    mine = [v for v in versions if v.dest == dest]
    chosen: Accounting | None = mine[0].settings if mine else None
    for version in mine:
        if version.from_ms <= minute_ms:
            chosen = version.settings
    return chosen if chosen is not None else Accounting()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("JVM stacktrace", "at ", "org.", "java.")):
            return line[:300]
    return type(exc).__name__


def describe(exc: Any) -> str:
    """One line from a Spark or Py4J error (the JVM's stack trace left out)."""
    return _first_line(exc)
