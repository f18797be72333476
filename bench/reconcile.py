"""`make bench-reconcile`: the Spark reconciliation of a day of N events, against DuckDB.

1. A synthetic archive (`bench.reconcile_archive`): N events over one UTC day of minutes in
   the auditor's layout, with dead letters, retries, duplicates, crash repeats and a known
   number missing. Its generation is timed apart and not counted (with `--work`, an archive
   of the same plan already there is used again).
2. `spark_batch.reconcile` in this process on a `local[2]` session: the session's start-up is
   timed apart, `spark_s` is start-up plus the job (every table collected to the driver).
3. The reference: the same reconciliation as a DuckDB query of the same Parquet files
   (`bench.reconcile_duckdb`, 2 threads), reading included.
4. Both results compared: every minute row with every column (counts, dead letters by reason,
   the nearest-rank lag percentiles, the judgement, the missing ids), the missing events and
   the nodes; and the totals against what the generator wrote.

The last line is `bench-reconcile: events=N spark_s=S startup_s=U duckdb_s=D identical=yes|no`;
the command exits 1 when the tables differ (or miss the generator's totals). The target on a
2-core machine: 10 million events in at most 60 s of `spark_s`, identical.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from bench import machine, reconcile_duckdb
from bench.reconcile_archive import DAY_MS, Plan, Truth, generate
from bench.report import write_results
from spark_batch.archive_input import Window
from spark_batch.reconcile import Reconciled

RESULTS_DIR = Path(__file__).parent / "results"
DEFAULT_EVENTS = 10_000_000
MASTER = "local[2]"
TARGETS = {"spark_s_max": 60.0}
SHOWN_DIFFERENCES = 10
_PLAN_FILE = "plan.json"
_TOTALS = ("entered", "delivered", "dead_lettered", "filtered", "in_retry", "missing", "duplicates")


@dataclass
class Figures:
    """One run's figures (seconds of wall time)."""

    events: int
    generate_s: float | None  # None: the archive of --work was used again
    startup_s: float
    query_s: float
    duckdb_s: float
    identical: bool
    differences: list[str] = field(default_factory=list)

    @property
    def spark_s(self) -> float:
        return self.startup_s + self.query_s

    def line(self) -> str:
        return (
            f"bench-reconcile: events={self.events} spark_s={self.spark_s:.1f}"
            f" startup_s={self.startup_s:.1f} duckdb_s={self.duckdb_s:.1f}"
            f" identical={'yes' if self.identical else 'no'}"
        )


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def differences(spark: Reconciled, reference: Reconciled) -> list[str]:
    """Where the two reconciliations differ, one line each (empty: identical)."""
    found: list[str] = []
    ours = {(row["dest"], row["minute_ms"]): row for row in spark.minutes}
    theirs = {(row["dest"], row["minute_ms"]): row for row in reference.minutes}
    for key in sorted(ours.keys() ^ theirs.keys()):
        found.append(f"minute {key}: only in {'spark' if key in ours else 'duckdb'}")
    for key in sorted(ours.keys() & theirs.keys()):
        a, b = ours[key], theirs[key]
        for column in sorted(a.keys() | b.keys()):
            if column not in a or column not in b or a[column] != b[column]:
                found.append(
                    f"minute {key} {column}: spark {a.get(column)!r}, duckdb {b.get(column)!r}"
                )
    mine, reference_missing = spark.missing.to_pylist(), reference.missing.to_pylist()
    if mine != reference_missing:
        found.append(
            f"missing events: spark {len(mine):,}, duckdb {len(reference_missing):,}"
            f" (first differing: {_first_difference(mine, reference_missing)})"
        )
    if spark.nodes != reference.nodes:
        found.append(f"nodes: spark {spark.nodes!r}, duckdb {reference.nodes!r}")
    return found


def _first_difference(a: list[Any], b: list[Any]) -> str:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return f"{x!r} / {y!r}"
    return "one list is longer"


def against_truth(result: Reconciled, truth: Truth) -> list[str]:
    """The totals the generator knows it wrote, against a reconciliation's."""
    found = []
    for name in _TOTALS:
        total = sum(int(row[name]) for row in result.minutes)
        known = truth.events if name == "entered" else getattr(truth, name)
        if total != known:
            found.append(f"total {name}: reconciled {total:,}, generated {known:,}")
    return found


def prepare(work: Path, plan: Plan) -> tuple[Path, Truth, float | None]:
    """The archive of `plan` under `work`: generated, or the one a previous run left there."""
    root = work / f"archive-{plan.events}-{plan.seed}"
    stamp = root / "_state" / _PLAN_FILE
    wanted = asdict(plan)
    if stamp.exists():
        kept = json.loads(stamp.read_text())
        if kept.get("plan") == wanted:
            _say(f"using the archive already in {root}")
            return root, Truth(**kept["truth"]), None
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _say(f"generating {plan.events:,} events in {root}")
    started = time.monotonic()
    truth = generate(root, plan)
    took = time.monotonic() - started
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"plan": wanted, "truth": asdict(truth)}))
    return root, truth, took


def measure(
    root: Path, window: Window, master: str
) -> tuple[Reconciled, Reconciled, float, float, float]:
    """Spark (start-up apart), then DuckDB, on the archive at `root`."""
    from spark_batch.reconcile import reconcile
    from spark_batch.session import spark_session

    _say(f"spark {master}: starting")
    with spark_session("hifi-bench-reconcile", master=master) as started:
        _say(f"spark started in {started.startup_s:.1f} s; reconciling")
        began = time.monotonic()
        spark_result = reconcile(started.spark, str(root), window)
        query_s = time.monotonic() - began
    _say(f"spark reconciled in {query_s:.1f} s; duckdb")
    answer = reconcile_duckdb.reference(root, window)
    _say(f"duckdb reconciled in {answer.seconds:.1f} s")
    return spark_result, answer.result, started.startup_s, query_s, answer.seconds


def _table(figures: Figures, truth: Truth, master: str) -> Any:
    from rich.table import Table

    table = Table(title=f"bench-reconcile: {figures.events:,} events, one day of minutes")
    for name, justify in (
        ("engine", "left"),
        ("start-up s", "right"),
        ("query s", "right"),
        ("total s", "right"),
        ("events/s", "right"),
        ("events/s, query", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_row(
        f"spark {master}",
        f"{figures.startup_s:.1f}",
        f"{figures.query_s:.1f}",
        f"{figures.spark_s:.1f}",
        f"{_rate(figures.events, figures.spark_s)}",
        f"{_rate(figures.events, figures.query_s)}",
    )
    table.add_row(
        "duckdb (2 threads)",
        "-",
        f"{figures.duckdb_s:.1f}",
        f"{figures.duckdb_s:.1f}",
        f"{_rate(figures.events, figures.duckdb_s)}",
        f"{_rate(figures.events, figures.duckdb_s)}",
    )
    table.caption = (
        f"{truth.entered_rows:,} entered and {truth.outcome_rows:,} outcome rows,"
        f" {truth.files:,} files, {truth.bytes / 2**20:,.0f} MiB; {truth.missing:,} missing"
    )
    return table


def _rate(events: int, seconds: float) -> str:
    return f"{events / seconds:,.0f}" if seconds > 0 else "-"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--events",
    type=click.IntRange(min=1),
    default=DEFAULT_EVENTS,
    show_default=True,
    help="Events in the day's archive.",
)
@click.option("--seed", default=7, show_default=True, help="Seed of the synthetic archive.")
@click.option(
    "--work",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Keep the archive here (and use it again next time); default: a temporary"
    " directory, removed.",
)
@click.option("--master", default=MASTER, show_default=True, help="Spark master.")
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path),
    default=RESULTS_DIR,
    show_default=True,
    help="Where the JSON file goes.",
)
def main(events: int, seed: int, work: Path | None, master: str, results_dir: Path) -> None:
    """Reconcile a synthetic day with Spark and with DuckDB; the last line is the summary."""
    from rich.console import Console

    plan = Plan(events, seed)
    start = datetime.now(UTC)
    temporary = work is None
    work = Path(tempfile.mkdtemp(prefix="hifi-bench-reconcile-")) if work is None else work
    try:
        root, truth, generate_s = prepare(work, plan)
        window = Window(plan.start_ms, plan.start_ms + DAY_MS)
        spark_result, reference, startup_s, query_s, duckdb_s = measure(root, window, master)
    finally:
        if temporary:
            shutil.rmtree(work, ignore_errors=True)
    found = differences(spark_result, reference)
    found += [f"spark {d}" for d in against_truth(spark_result, truth)]
    found += [f"duckdb {d}" for d in against_truth(reference, truth)]
    figures = Figures(events, generate_s, startup_s, query_s, duckdb_s, not found, found)
    report = {
        "started": start.isoformat(timespec="seconds"),
        "command": "make bench-reconcile (python -m bench.reconcile)",
        "machine": machine.describe(),
        "plan": asdict(plan),
        "master": master,
        "truth": asdict(truth),
        "minutes": len(spark_result.minutes),
        **asdict(figures),
        "spark_s": round(figures.spark_s, 2),
        "spark_events_per_s": round(events / figures.spark_s),
        "duckdb_events_per_s": round(events / duckdb_s),
        "targets": TARGETS,
        "line": figures.line(),
    }
    path = write_results(results_dir, "bench-reconcile", start, report)
    console = Console(width=120)
    console.print(_table(figures, truth, master))
    if generate_s is not None:
        print(f"archive generated in {generate_s:.1f} s (not counted)")
    for line in found[:SHOWN_DIFFERENCES]:
        print(f"differs: {line}")
    if len(found) > SHOWN_DIFFERENCES:
        print(f"differs: ... and {len(found) - SHOWN_DIFFERENCES:,} more")
    print(f"results: {path}")
    print(figures.line())
    sys.exit(0 if figures.identical else 1)


if __name__ == "__main__":
    main()
