"""`spark-batch reconcile` as an operator runs it: the outputs, reruns, bad input, spark-submit's entry."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from spark_batch.cli import cli
from tests.spark_batch.support import DAY, small_archive

pytestmark = [pytest.mark.spark]
REPORT_KEYS = {
    "minute",
    "entered",
    "accepted",
    "delivered",
    "dead_lettered",
    "dead_lettered_by_reason",
    "filtered",
    "in_retry",
    "waiting",
    "missing",
    "duplicates",
    "lag_p50_ms",
    "lag_p95_ms",
    "lag_p99_ms",
    "lag_in_p95_ms",
    "process_p95_ms",
    "final",
    "up",
    "down_reason",
    "missing_ids",
}


def _reconcile(*args: str) -> Any:
    return CliRunner().invoke(cli, ["reconcile", *args], catch_exceptions=False)


def _digest(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_outputs_a_person_and_a_backfill_can_use_and_a_rerun_is_identical(
    spark: Any, tmp_path: Path
) -> None:
    """Parquet tables, minutes.json with the report's keys, a summary, an HTML page with its
    four charts; the missing event in missing.parquet; a second run writes the same bytes."""
    archive, out = small_archive(tmp_path / "archive"), tmp_path / "out"
    run = _reconcile("--archive", str(archive), "--from", DAY, "--out", str(out))
    assert run.exit_code == 0, run.output
    assert (
        "shop: 11 entered, 8 delivered, 1 dead-lettered, 0 in retry: 2 events missing" in run.output
    )
    minutes = json.loads((out / "minutes.json").read_text())
    assert [m["minute"] for m in minutes] == [
        f"{DAY}T10:00:00Z",
        f"{DAY}T10:03:00Z",
        f"{DAY}T10:30:00Z",
    ]
    assert all(set(m) == REPORT_KEYS | {"dest"} for m in minutes)
    assert minutes[0]["dead_lettered_by_reason"] == {"redirect": 1}
    assert (minutes[0]["missing"], minutes[0]["up"], minutes[0]["missing_ids"]) == (
        1,
        False,
        ["orders-0-7"],
    )
    missing = pq.read_table(out / "missing.parquet").to_pylist()
    assert [(m["topic"], m["partition"], m["offset"]) for m in missing] == [
        ("orders", 0, 7),
        ("orders", 0, 10),
    ]
    summary = json.loads((out / "summary.json").read_text())
    shop = summary["destinations"]["shop"]
    assert (shop["lossless"], shop["totals"]["missing"]) == (False, 2)
    [day] = shop["days"]
    assert (day["day"], day["down_for_loss"], day["all_up"]) == (DAY, 1, False)
    assert day["up_minutes"] + day["down_minutes"] == day["minutes"]
    page = (out / "report.html").read_text()
    assert "2 events missing" in page
    charts = sorted(p.name for p in (out / "charts").iterdir())
    assert charts == ["shop-availability.png", "shop-lag.png", "shop-loss.png", "shop-nodes.png"]
    assert all((out / "charts" / name).read_bytes().startswith(b"\x89PNG") for name in charts)
    assert pq.read_table(out / "minutes.parquet").num_rows == 3
    first = _digest(out)
    again = _reconcile("--archive", str(archive), "--from", DAY, "--out", str(out))
    assert again.exit_code == 0, again.output
    assert _digest(out) == first
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("case", ["empty", "no_such_dest", "corrupt", "bad_range"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    spark: Any, tmp_path: Path, case: str
) -> None:
    """An empty archive, a destination it does not hold, a corrupt Parquet file, a range that
    ends before it starts: one line naming what is wrong, exit 2, and no output at all."""
    archive, out = tmp_path / "archive", tmp_path / "out"
    args = ["--archive", str(archive), "--from", DAY, "--out", str(out)]
    if case == "empty":
        archive.mkdir()
        expected = "no entered rows"
    elif case == "no_such_dest":
        small_archive(archive)
        args += ["--dest", "nowhere"]
        expected = "no entered rows of destination nowhere"
    elif case == "corrupt":
        small_archive(archive)
        victim = next(archive.glob("entered/**/*.parquet"))
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
        expected = "cannot be read (corrupt or not Parquet)"
    else:
        small_archive(archive)
        args += ["--to", "2026-09-20"]
        expected = "is not after --from"
    run = CliRunner().invoke(cli, ["reconcile", *args])
    assert run.exit_code == 2, run.output
    lines = run.output.strip().splitlines()
    assert len(lines) == 1, run.output
    assert expected in lines[0]
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.slow
def test_the_entry_point_runs_as_its_own_process(spark: Any, tmp_path: Path) -> None:
    """`python -m spark_batch reconcile` (the file spark-submit runs) starts its own local Spark."""
    archive, out = small_archive(tmp_path / "archive"), tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_batch",
            "reconcile",
            "--archive",
            str(archive),
            "--from",
            DAY,
            "--out",
            str(out),
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=dict(os.environ),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "spark-batch reconcile: wrote" in run.stdout
    assert (
        json.loads((out / "summary.json").read_text())["destinations"]["shop"]["totals"]["entered"]
        == 11
    )
