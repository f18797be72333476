"""The short version of `make bench-reconcile`: 20,000 events through Spark and DuckDB on the
session's local Spark, the summary line, its JSON, and a difference reported when there is one."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from bench import reconcile as bench
from bench import reconcile_duckdb
from bench.reconcile_archive import DAY_MS, Plan
from spark_batch.archive_input import Window

pytestmark = [pytest.mark.spark]
EVENTS = 20_000
_LINE = re.compile(
    r"^bench-reconcile: events=(\d+) spark_s=(\d+\.\d) startup_s=(\d+\.\d)"
    r" duckdb_s=(\d+\.\d) identical=(yes|no)$"
)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the archive of 20,000 events, which every run here uses again."""
    work = tmp_path_factory.mktemp("bench-reconcile")
    bench.prepare(work, Plan(EVENTS))
    return work


def _run(work: Path, results: Path) -> Any:
    return CliRunner().invoke(
        bench.main,
        ["--events", str(EVENTS), "--work", str(work), "--results-dir", str(results)],
        catch_exceptions=False,
    )


def test_spark_and_duckdb_agree_and_the_last_line_says_so(
    spark: Any, work: Path, tmp_path: Path
) -> None:
    """The tables are identical (and have the generator's totals, its missing events among
    them); the last line and the JSON carry the figures."""
    run = _run(work, tmp_path)
    assert run.exit_code == 0, run.output[-3000:]
    last = run.output.strip().splitlines()[-1]
    found = _LINE.match(last)
    assert found, last
    events, spark_s, startup_s, duckdb_s, identical = found.groups()
    assert (int(events), identical) == (EVENTS, "yes")
    assert float(spark_s) >= float(startup_s) >= 0
    assert float(duckdb_s) > 0
    [path] = tmp_path.glob("bench-reconcile-*.json")
    report = orjson.loads(path.read_bytes())
    assert (report["line"], report["identical"], report["differences"]) == (last, True, [])
    assert report["minutes"] == 1440
    assert report["truth"]["missing"] == Plan(EVENTS).missing_events == 2


def test_a_changed_cell_makes_the_run_fail_and_say_where(
    spark: Any, work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one lag percentile of the reference off by a millisecond, the run says
    identical=no, names the minute and the column, and exits 1."""
    original = reconcile_duckdb.reference

    def altered(*args: Any, **kwargs: Any) -> reconcile_duckdb.Answer:
        answer = original(*args, **kwargs)
        row = answer.result.minutes[700]
        row["lag_p95_ms"] += 1
        return answer

    monkeypatch.setattr(reconcile_duckdb, "reference", altered)
    run = _run(work, tmp_path)
    assert run.exit_code == 1, run.output[-3000:]
    lines = run.output.strip().splitlines()
    assert lines[-1].endswith(" identical=no"), lines[-1]
    assert any("lag_p95_ms" in line and line.startswith("differs: minute") for line in lines)


def test_differences_name_every_table(work: Path) -> None:
    """Minute rows, missing events and nodes are each compared (DuckDB against an altered copy
    of itself; no Spark needed)."""
    plan = Plan(EVENTS)
    root, _, _ = bench.prepare(work, plan)
    result = reconcile_duckdb.reference(root, Window(plan.start_ms, plan.start_ms + DAY_MS)).result
    assert bench.differences(result, result) == []
    other = copy.deepcopy(result)
    other.minutes[3]["dead_lettered_by_reason"] = {"http_4xx": 99}
    other.minutes.pop()
    other.missing = other.missing.slice(1)
    other.nodes[0]["process_p99_ms"] += 1
    found = bench.differences(result, other)
    assert any("dead_lettered_by_reason" in line for line in found), found
    assert any("only in spark" in line for line in found), found
    assert any(line.startswith("missing events") for line in found), found
    assert any(line.startswith("nodes") for line in found), found
