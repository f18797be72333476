"""The Spark session of a batch job: local by default, the cluster's under `spark-submit`.

Under `spark-submit` the master, memory and the rest come from the submit command; run
directly, a job starts a local session (`--master`, default `local[*]`) tuned for a small
machine: few shuffle partitions, no UI, UTC, Hive partition values kept as strings, the
parallel garbage collector.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hifi.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
_SHUFFLE_PARTITIONS_PER_CORE = 2


@dataclass
class Started:
    """A session and how long it took to start (the bench reports start-up apart)."""

    spark: SparkSession
    startup_s: float


def java_missing() -> str | None:
    """Why Spark cannot start here, in one line; None when a JVM is at hand."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return None
    if shutil.which("java"):
        return None
    return (
        "no Java runtime: PySpark needs Java 17 (apt-get install openjdk-17-jre-headless,"
        " or set JAVA_HOME)"
    )


def _under_spark_submit() -> bool:
    return "SPARK_SUBMIT_OPTS" in os.environ or "PYSPARK_GATEWAY_PORT" in os.environ


def _local_cores(master: str) -> int:
    inside = master.partition("[")[2].rstrip("]")
    if inside.isdigit():
        return max(1, int(inside))
    return os.cpu_count() or 2


@contextmanager
def spark_session(app_name: str, *, master: str | None = None) -> Iterator[Started]:
    """A Spark session for one job, stopped at the end unless it was there already."""
    why = java_missing()
    if why is not None:
        raise ConfigError(why)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError(
            "PySpark is not installed: pip install 'hifi[spark]' (make test installs it)"
        ) from None
    started_at = time.monotonic()
    builder = SparkSession.builder.appName(app_name)
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    builder = builder.config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    if not _under_spark_submit():
        chosen = master or DEFAULT_MASTER
        partitions = _SHUFFLE_PARTITIONS_PER_CORE * _local_cores(chosen)
        builder = (
            builder.master(chosen)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(partitions))
            .config("spark.default.parallelism", str(partitions))
            .config("spark.sql.adaptive.enabled", "true")
            .config("spark.driver.memory", os.environ.get("HIFI_SPARK_DRIVER_MEMORY", "4g"))
            # a batch job: the throughput collector, fewer and shorter pauses in all
            .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        )
    existing = SparkSession.getActiveSession()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield Started(spark, time.monotonic() - started_at)
    finally:
        if existing is None:
            spark.stop()
