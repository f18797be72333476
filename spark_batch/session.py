"""The Spark session of a batch job: local by default, the cluster's under `spark-submit`.

Under `spark-submit` the master, memory and the rest come from the submit command (a
`--master` of the job's own is refused there); run directly, a job starts a session on
`--master` (default `local[*]`) tuned for a small machine: few shuffle partitions, no UI, UTC,
Hive partition values kept as strings, the parallel garbage collector. Either way a master
URL that is not one, or a standalone master that does not answer, is one line before any job
waits on it (Spark itself retries a silent master for a minute, then fails every job).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hifi.errors import CommandFailed, ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
_SHUFFLE_PARTITIONS_PER_CORE = 2
# the masters Spark takes: local (threads), a standalone cluster (one or more masters), YARN,
# Kubernetes, and local-cluster (Spark's own test cluster)
_HOST_PORT = r"(\[[0-9a-fA-F:.]+\]|[^\s/:,\[\]]+):\d+"
_MASTER = re.compile(
    rf"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]"
    rf"|spark://{_HOST_PORT}(,{_HOST_PORT})*|yarn|k8s://\S+"
)
_MASTER_FORMS = "local[*], local[N], spark://HOST:PORT, yarn or k8s://https://HOST:PORT"
_CONNECT_TIMEOUT_S = 5.0


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
    """Whether spark-submit started this driver (its Python runner hands it the gateway)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def check_master(master: str) -> None:
    """Refuse what is not a Spark master URL, in one line (Spark would say so in a trace)."""
    if not _MASTER.fullmatch(master):
        raise ConfigError(f"--master {master}: not a Spark master URL ({_MASTER_FORMS})")


def check_reachable(master: str, *, timeout_s: float = _CONNECT_TIMEOUT_S) -> None:
    """For a standalone master (`spark://HOST:PORT[,HOST:PORT...]`): that one of them accepts
    a connection; the other masters are left to Spark."""
    if not master.startswith("spark://"):
        return
    failures = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"master {master}: {address!r} is not HOST:PORT")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except OSError as exc:
            failures.append(f"{address} ({exc.strerror or exc})")
        else:
            return
    raise CommandFailed(
        f"spark master {master}: nothing answers at {', '.join(failures)};"
        " is the master running, and is the URL the one its log shows?"
    )


def _submitted_master() -> str:
    """The master spark-submit gave the driver's JVM (before a context is made with it)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return str(SparkConf().get("spark.master") or "")


def _local_cores(master: str) -> int:
    inside = master.partition("[")[2].rstrip("]")
    if inside.isdigit():
        return max(1, int(inside))
    return os.cpu_count() or 2


@contextmanager
def spark_session(app_name: str, *, master: str | None = None) -> Iterator[Started]:
    """A Spark session for one job, stopped at the end unless it was there already."""
    submitted = _under_spark_submit()
    if submitted and master is not None:
        raise ConfigError(
            f"--master {master}: under spark-submit the master is spark-submit's --master;"
            " leave the job's out"
        )
    if master is not None:
        check_master(master)
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
    check_reachable(_submitted_master() if submitted else master or DEFAULT_MASTER)
    builder = SparkSession.builder.appName(app_name)
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    builder = builder.config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    if not submitted:
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
