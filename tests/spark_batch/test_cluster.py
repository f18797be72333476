"""`spark-batch reconcile` submitted to a standalone cluster (a master and a worker on loopback),
running from the zip alone, writes what local mode writes, byte for byte."""

from __future__ import annotations

import hashlib
import subprocess
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from devstack.ports import free_port
from devstack.spark_standalone import Cluster, standalone_cluster
from hifi.vocabulary import Outcome, Reason
from spark_batch.cli import cli
from spark_batch.package import Packaged, package
from spark_batch.session import java_missing
from tests.spark_batch.support import DAY, Built, minute

pytestmark = [pytest.mark.spark, pytest.mark.slow]
_SUBMIT_TIMEOUT_S = 300
# a small cluster on a shared 2-core machine: one executor core, little memory, no waits for
# data locality (every file is local anyway) and two partitions per shuffle
_FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # short-lived JVMs: less JIT, small GC
_SUBMIT_OPTIONS = [
    *("--driver-memory", "1g", "--executor-memory", "512m", "--total-executor-cores", "1"),
    *("--conf", f"spark.driver.extraJavaOptions={_FAST_JVM}"),
    *("--conf", f"spark.executor.extraJavaOptions={_FAST_JVM}"),
    *("--conf", "spark.ui.enabled=false", "--conf", "spark.locality.wait=0"),
    *("--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.default.parallelism=2"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and one worker (1 core, 1 GiB for executors), stopped after the module."""
    why = java_missing()
    if why is not None:
        pytest.skip(why)
    with standalone_cluster(tmp_path_factory.mktemp("standalone"), cores=1, memory_mb=1024) as up:
        yield up


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Packaged:
    """The zip and driver file, as `spark-batch package` writes them."""
    return package(tmp_path_factory.mktemp("job"))


@dataclass(frozen=True)
class Interpreters:
    """The driver's and the executors' Python, neither with the checkout on its path."""

    driver: Path
    executors: Path


@pytest.fixture(scope="module")
def interpreters(tmp_path_factory: pytest.TempPathFactory) -> Interpreters:
    """This virtualenv's interpreter without its site (`-S`), so without the editable install
    of this checkout: for the driver with the virtualenv's packages on the path after what
    spark-submit puts first (hifi's own packages come from the zip or not at all), for the
    executors with nothing but the standard library and what Spark gives them."""
    directory = tmp_path_factory.mktemp("python")
    packages = sysconfig.get_paths()["purelib"]
    interpreter = Path(sysconfig.get_paths()["scripts"]) / "python"
    scripts = {
        "driver": f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{packages}" exec {interpreter} -S "$@"',
        "executors": f'exec {interpreter} -S "$@"',
    }
    for name, line in scripts.items():
        (directory / name).write_text(f"#!/bin/sh\n{line}\n")
        (directory / name).chmod(0o755)
    return Interpreters(directory / "driver", directory / "executors")


def _archive(root: Path) -> Path:
    """Two partitions over four minutes: deliveries (one twice), a dead letter, a filtered
    event, one handed off, one late, missing events, a fact archived twice."""
    built = Built(root)
    for index, partition in [(0, 0), (0, 1), (2, 0), (5, 1)]:
        at = minute(index)
        offsets = list(range(10 * index, 10 * index + 6))
        built.enter(at, offsets, partition=partition)
        delivered = built.fact(
            Outcome.DELIVERED,
            offsets[:3],
            at_ms=at + 900 + 100 * partition,
            minute_ms=at,
            partition=partition,
        )
        built.again(delivered, at)
        built.fact(
            Outcome.DELIVERED, offsets[:1], at_ms=at + 2000, minute_ms=at, partition=partition
        )
        built.fact(
            Outcome.DEAD_LETTERED,
            offsets[3:4],
            at_ms=at + 1500,
            minute_ms=at,
            partition=partition,
            reason=Reason.REDIRECT,
        )
        built.fact(
            Outcome.FILTERED, offsets[4:5], at_ms=at + 1200, minute_ms=at, partition=partition
        )
        if partition:
            built.fact(Outcome.HANDED_OFF, offsets[5:], at_ms=at + 1300, minute_ms=at, partition=1)
        else:
            built.fact(Outcome.DELIVERED, offsets[5:], at_ms=at + 95_000, minute_ms=at)
    built.enter(minute(40), [99])
    built.close()
    return root


def _digest(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _submit(cluster: Cluster, python: Interpreters, cwd: Path, *args: str, master: str = "") -> Any:
    """spark-submit as an operator runs it, from a directory outside the checkout."""
    command = [
        str(cluster.spark_submit),
        *("--master", master or cluster.master_url),
        *_SUBMIT_OPTIONS,
        *("--conf", f"spark.pyspark.python={python.executors}"),
        *("--conf", f"spark.pyspark.driver.python={python.driver}"),
        *args,
    ]
    return subprocess.run(
        command,
        cwd=cwd,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=_SUBMIT_TIMEOUT_S,
        check=False,
    )


def test_reconcile_submitted_to_a_standalone_cluster_writes_what_local_mode_writes(
    spark: Any, cluster: Cluster, job: Packaged, interpreters: Interpreters, tmp_path: Path
) -> None:
    """spark-submit --master spark://... --py-files hifi-spark.zip spark_batch_driver.py
    reconcile: the cluster's executors run it (the master lists it finished), the driver
    imports hifi from the zip (its Python cannot without it), and every output file has the
    bytes of the same reconciliation in local mode."""
    archive = _archive(tmp_path / "archive")
    local, on_cluster = tmp_path / "local", tmp_path / "cluster"
    args = ["reconcile", "--archive", str(archive), "--from", DAY]
    here = CliRunner().invoke(cli, [*args, "--out", str(local)], catch_exceptions=False)
    assert here.exit_code == 0, here.output
    without_zip = subprocess.run(
        [str(interpreters.driver), "-c", "import spark_batch"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert without_zip.returncode != 0, "the checkout is importable without the zip"
    run = _submit(
        cluster,
        interpreters,
        tmp_path,
        *("--py-files", str(job.zip_path), str(job.driver_path)),
        *args,
        *("--out", str(on_cluster)),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[:-1] == here.output.splitlines()[:-1]
    assert [(app["name"], app["state"]) for app in cluster.applications()] == [
        ("hifi-reconcile", "FINISHED")
    ]
    assert _digest(on_cluster) == _digest(local)
    assert len(_digest(local)) >= 10


def test_without_the_zip_or_with_a_master_that_does_not_answer_it_is_one_line(
    cluster: Cluster, job: Packaged, interpreters: Interpreters, tmp_path: Path
) -> None:
    """The driver file run without --py-files: one line naming --py-files, exit 2; submitted to
    a master nothing answers at: one line naming it, exit 1, nothing written."""
    args = ["reconcile", "--archive", str(tmp_path), "--from", DAY, "--out", str(tmp_path / "out")]
    no_zip = _submit(cluster, interpreters, tmp_path, str(job.driver_path), *args)
    assert no_zip.returncode == 2, no_zip.stderr[-3000:]
    # spark-submit passes on the Python driver's output, stderr included, as its stdout
    [line] = [line for line in no_zip.stdout.splitlines() if line.startswith("spark-batch")]
    assert "--py-files hifi-spark.zip" in line, no_zip.stdout
    nowhere = f"spark://127.0.0.1:{free_port()}"
    lost = _submit(
        cluster,
        interpreters,
        tmp_path,
        *("--py-files", str(job.zip_path), str(job.driver_path)),
        *args,
        master=nowhere,
    )
    assert lost.returncode == 1, lost.stderr[-3000:]
    [line] = [line for line in lost.stdout.splitlines() if line.startswith("spark-batch")]
    assert f"spark master {nowhere}: nothing answers" in line, lost.stdout
    assert not (tmp_path / "out").exists()
