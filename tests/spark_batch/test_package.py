"""What spark-submit is given (`spark-batch package`), and the one-line refusals before Spark starts."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import spark_batch
from spark_batch.cli import cli
from spark_batch.driver import why_not_importable
from spark_batch.package import DRIVER_NAME, PACKAGES, ZIP_NAME, package
from spark_batch.session import check_master
from tests.spark_batch.support import DAY


def test_the_zip_holds_the_job_packages_sources_and_the_same_bytes_twice(tmp_path: Path) -> None:
    """Every source file of spark_batch, config and hifi, no bytecode, no other
    package; built twice, the same bytes; the driver file beside it is spark_batch/driver.py."""
    first = package(tmp_path / "a")
    second = package(tmp_path / "b")
    assert first.zip_path.read_bytes() == second.zip_path.read_bytes()
    with zipfile.ZipFile(first.zip_path) as archive:
        names = archive.namelist()
    assert {name.partition("/")[0] for name in names} == set(PACKAGES)
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    root = Path(spark_batch.__file__).parent.parent
    sources = {
        path.relative_to(root).as_posix()
        for name in PACKAGES
        for path in (root / name).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert sources <= set(names)
    assert "spark_batch/cli.py" in names
    assert "hifi/accounting/ledger.py" in names
    assert first.files == len(names)
    assert first.driver_path.read_bytes() == (root / "spark_batch" / "driver.py").read_bytes()


def test_package_command_writes_both_files_and_refuses_a_file_as_out(tmp_path: Path) -> None:
    """`spark-batch package --out DIR` names what it wrote; `--out` on a file is one line, exit 2."""
    run = CliRunner().invoke(cli, ["package", "--out", str(tmp_path / "job")])
    assert run.exit_code == 0, run.output
    assert (tmp_path / "job" / ZIP_NAME).is_file()
    assert (tmp_path / "job" / DRIVER_NAME).is_file()
    assert f"{ZIP_NAME} ({len(zipfile.ZipFile(tmp_path / 'job' / ZIP_NAME).namelist())} files" in (
        run.output
    )
    taken = tmp_path / "file"
    taken.write_text("")
    refused = CliRunner().invoke(cli, ["package", "--out", str(taken)])
    assert refused.exit_code == 2
    assert "is a file, not a directory" in refused.output


def test_a_failed_import_of_the_job_says_whether_the_zip_or_a_dependency_is_missing() -> None:
    """The driver file's line names --py-files for hifi's packages, pip for anything else."""
    zip_missing = why_not_importable(ModuleNotFoundError("x", name="spark_batch"))
    assert "--py-files hifi-spark.zip" in zip_missing
    assert "spark-batch package" in zip_missing
    dependency = why_not_importable(ModuleNotFoundError("x", name="pyarrow"))
    assert "cannot import pyarrow" in dependency
    assert "pip install" in dependency


@pytest.mark.parametrize(
    "master", ["local", "local[2]", "local[*]", "spark://h:7077,g:7077", "yarn"]
)
def test_master_urls_spark_takes_pass(master: str) -> None:
    """The forms of master URL Spark takes pass the check."""
    check_master(master)


@pytest.mark.parametrize("master", ["sprk://h:7077", "spark://h", "local[two]", "h:7077"])
def test_a_master_url_that_is_not_one_is_one_line_exit_2(tmp_path: Path, master: str) -> None:
    """A malformed --master is refused before a JVM starts: one line, exit 2, nothing written."""
    out = tmp_path / "out"
    args = ["--archive", str(tmp_path), "--from", DAY, "--out", str(out), "--master", master]
    run = CliRunner().invoke(cli, ["reconcile", *args])
    assert run.exit_code == 2, run.output
    [line] = run.output.strip().splitlines()
    assert f"--master {master}: not a Spark master URL" in line
    assert not out.exists()


def test_under_spark_submit_the_jobs_own_master_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under spark-submit (its gateway in the environment) a --master of the job's is refused."""
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    args = ["--archive", str(tmp_path), "--from", DAY, "--out", str(tmp_path / "out")]
    run = CliRunner().invoke(cli, ["reconcile", *args, "--master", "local[1]"])
    assert run.exit_code == 2, run.output
    assert "under spark-submit the master is spark-submit's --master" in run.output
