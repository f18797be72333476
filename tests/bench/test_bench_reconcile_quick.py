"""The short version of `make bench-reconcile`: 20,000 events through Spark and DuckDB on the
session's local Spark, the summary line, its JSON, and a difference reported when there is one;
and Spark against the DuckDB reference on odd archives the synthetic day does not cover."""

from __future__ import annotations

import copy
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from bench import reconcile as bench
from bench import reconcile_duckdb
from bench.reconcile_archive import DAY_MS, Plan
from hifi.accounting.buckets import MINUTE_MS
from hifi.vocabulary import Outcome, Reason
from spark_batch.archive_input import Window
from spark_batch.reconcile import reconcile
from tests.spark_batch.support import T0, Built, minute

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


def _odd_archive(root: Path, seed: int) -> None:
    """Events with every problem (no id, malformed, time in the past or future: filed by
    Kafka time, their facts by event time, days away), entered rows repeated with another
    problem or minute, facts repeated, 2xx after dead letters, several nodes, missing ones."""
    rng = random.Random(seed)
    built = Built(root, settle_s=60.0)
    problems = [None, None, None, "no_id", "malformed", "time_past", "time_future", "too_large"]
    for m in range(50):
        at = minute(m)
        for offset in range(m * 20, m * 20 + 20):
            problem = rng.choice(problems)
            event_ms = at + {"time_past": -3 * DAY_MS, "time_future": 10 * DAY_MS}.get(
                str(problem), 1000
            )
            for again in range(1 + (rng.random() < 0.2)):
                entered_problem = problem if not again else rng.choice(problems)
                built.enter(
                    at + again * rng.choice([0, MINUTE_MS]),
                    [offset],
                    event_ms=event_ms,
                    kafka_ms=at + 500,
                    problem=entered_problem,
                    ids=[None if entered_problem in ("no_id", "malformed") else f"e{offset}"],
                )
            _odd_facts(built, rng, offset, at, event_ms)
    built.close()


def _odd_facts(built: Built, rng: random.Random, offset: int, at: int, event_ms: int) -> None:
    def fact(outcome: Outcome, after_ms: int, **kwargs: Any) -> Any:
        return built.fact(
            outcome,
            [offset],
            at_ms=at + after_ms,
            minute_ms=event_ms - event_ms % MINUTE_MS,
            event_ms=event_ms,
            **kwargs,
        )

    fate = rng.random()
    if fate < 0.6:
        taken = rng.choice([0, at + 1200, event_ms + 5])
        first = fact(
            Outcome.DELIVERED,
            rng.randrange(1000, 90_000),
            taken_ms=taken,
            node=rng.choice(["connector@a:1", "connector@b:2"]),
        )
        if rng.random() < 0.2:
            built.again(first, event_ms - event_ms % MINUTE_MS)
        if rng.random() < 0.2:
            fact(Outcome.DELIVERED, rng.randrange(90_000, 900_000))
    elif fate < 0.7:
        fact(
            Outcome.DEAD_LETTERED,
            rng.randrange(1000, 5000),
            reason=rng.choice([Reason.HTTP_4XX, Reason.MALFORMED, None]),
        )
        if rng.random() < 0.3:
            fact(Outcome.DELIVERED, rng.randrange(10_000, 20_000))
    elif fate < 0.8:
        fact(Outcome.FILTERED, 1500)
    elif fate < 0.9:
        fact(Outcome.HANDED_OFF, 1500)
        if rng.random() < 0.5:
            fact(Outcome.ROUTED, 1600)


def test_odd_events_agree_with_the_reference(spark: Any, tmp_path: Path) -> None:
    """On an archive the bench's synthetic day does not cover (every problem, entered rows
    repeated differently, facts filed days away, so read by origin from other dates than the
    window's), Spark and DuckDB agree on every table."""
    _odd_archive(tmp_path, seed=2)
    window = Window(T0, T0 + 3 * 3_600_000)
    ours = reconcile(spark, str(tmp_path), window)
    assert len(ours.missing) > 0
    assert bench.differences(ours, reconcile_duckdb.reference(tmp_path, window).result) == []
