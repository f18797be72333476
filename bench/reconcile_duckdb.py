"""The reference `make bench-reconcile` checks Spark against: the same reconciliation as one
DuckDB query over the same Parquet files.

It follows the rules of `spark_batch/reconcile.py` (and `docs/reconciliation.md`), written
independently in SQL, the way a person checking the figures by hand would write them:

- entered rows grouped by origin (`dest/topic/partition/offset`): the first `minute_ms`, the
  greatest `event_id`, the first event time, the last Kafka timestamp, the `problem`;
- outcome rows of the window's dates (and, for events with odd times, of any date) grouped by
  origin: distinct delivered `fact_id`s, the first 2xx time and what the node said then
  (`taken_ms`, `node`), the reason of the first dead letter, whether any dead letter, filter or
  hand-off (`handed_off`, `re_offered`) was seen, the last outcome time;
- one left join of the two, the status by the auditor's precedence (delivered, dead-lettered,
  filtered, in retry, missing), lags as Spark computes them;
- per destination and minute: counts, `on_time` against the `settle_s` in force (an ASOF join
  on the archived settings versions, read by `auditor.archive.read`), and the exact
  nearest-rank percentiles as `quantile_disc` (DuckDB's discrete quantile is the nearest rank:
  the smallest value with at least p % of the values at or below it).

Only the Python judgement of each minute (`spark_batch.reconcile.finish`: final, up, down
reason, missing ids) is shared with the Spark job: the query is what is compared.
"""

# ruff: noqa: S608 - the SQL is built from this module's constants, numbers and `_list`'s quoted values

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from auditor.archive.read import read_settings
from config.destination import Accounting
from hifi.accounting.archive_layout import Kind
from hifi.accounting.buckets import MINUTE_MS
from hifi.vocabulary import Outcome
from spark_batch.archive_input import SettingsVersion, Window
from spark_batch.origins import FUTURE_TOLERANCE_MS, LAG_MAX_MS
from spark_batch.reconcile import Reconciled, finish

_DELIVERED = f"outcome = '{Outcome.DELIVERED}'"
_DEAD = f"outcome = '{Outcome.DEAD_LETTERED}'"


@dataclass
class Answer:
    """The reference's reconciliation and how long DuckDB took (reading the files included)."""

    result: Reconciled
    seconds: float


def _files(root: Path, kind: Kind) -> str:
    return str(root / str(kind) / "dest=*" / "date=*" / "hour=*" / "*.parquet")


def _scan(root: Path, kind: Kind) -> str:
    return (
        f"read_parquet('{_files(root, kind)}', hive_partitioning = true,"
        " hive_types_autocast = false)"
    )


def _list(values: list[str]) -> str:
    return ", ".join("'" + value.replace("'", "''") + "'" for value in values)


def _versions(root: Path) -> list[SettingsVersion]:
    found = []
    settings_dir = root / "settings"
    dests = (
        sorted(p.name.removeprefix("dest=") for p in settings_dir.glob("dest=*"))
        if settings_dir.is_dir()
        else []
    )
    for dest in dests:
        for version in read_settings(root, dest):
            found.append(
                SettingsVersion(dest, int(version["from_ms"]), Accounting(**version["settings"]))
            )
    return found


def reference(
    root: Path,
    window: Window,
    *,
    dests: list[str] | None = None,
    lag_sla_s: float | None = None,
    threads: int = 2,
) -> Answer:
    """The reconciliation of `window` by DuckDB (`threads` worker threads)."""
    started = time.monotonic()
    con = duckdb.connect(config={"threads": threads})
    try:
        result = _run(con, root, window, dests, lag_sla_s)
    finally:
        con.close()
    return Answer(result, time.monotonic() - started)


def _run(
    con: Any, root: Path, window: Window, dests: list[str] | None, lag_sla_s: float | None
) -> Reconciled:
    dates = _list(window.dates())
    only = f"AND dest IN ({_list(dests)})" if dests else ""
    con.execute(
        f"""CREATE TEMP VIEW entered AS
        SELECT dest, minute_ms, topic, "partition", "offset", event_id, event_time_ms, kafka_ms,
               problem
        FROM {_scan(root, Kind.ENTERED)} WHERE date IN ({dates}) {only}"""
    )
    outcome_columns = (
        'dest, topic, "partition", "offset", fact_id, node, outcome, reason, outcome_ms, taken_ms'
    )
    con.execute(
        f"""CREATE TEMP VIEW outcomes AS SELECT {outcome_columns}
        FROM {_scan(root, Kind.OUTCOMES)} WHERE date IN ({dates}) {only}"""
    )
    odd = con.execute(
        "SELECT count(*) FROM entered WHERE problem IN ('time_past', 'time_future')"
    ).fetchone()[0]
    if odd:  # their facts are filed by event time, their entered rows by Kafka time
        con.execute(
            f"""CREATE OR REPLACE TEMP VIEW outcomes AS
            SELECT {outcome_columns} FROM {_scan(root, Kind.OUTCOMES)}
            WHERE date IN ({dates}) {only}
            UNION ALL
            SELECT {outcome_columns} FROM {_scan(root, Kind.OUTCOMES)} o
            WHERE (dest, topic, "partition", "offset") IN (
                SELECT (dest, topic, "partition", "offset") FROM entered
                WHERE problem IN ('time_past', 'time_future'))"""
        )
    versions = _versions(root)
    default_settle_ms = round(Accounting().settle_s * 1000)
    con.execute("CREATE TEMP TABLE settle (dest VARCHAR, from_ms BIGINT, settle_ms BIGINT)")
    if versions:
        con.executemany(
            "INSERT INTO settle VALUES (?, ?, ?)",
            [[v.dest, v.from_ms, round(v.settings.settle_s * 1000)] for v in versions],
        )
    con.execute(
        f"""CREATE TEMP TABLE per_origin AS
        WITH e AS (
            SELECT dest, topic, "partition", "offset", min(minute_ms) AS minute_ms,
                   max(event_id) AS event_id, min(event_time_ms) AS event_time_ms,
                   max(kafka_ms) AS kafka_ms, max(problem) AS problem
            FROM entered GROUP BY dest, topic, "partition", "offset"
        ), f AS (
            SELECT dest, topic, "partition", "offset",
                   count(DISTINCT fact_id) FILTER (WHERE {_DELIVERED}) AS deliveries,
                   min(outcome_ms) FILTER (WHERE {_DELIVERED}) AS first_2xx_ms,
                   max(outcome_ms) AS last_outcome_ms,
                   arg_min(taken_ms, outcome_ms) FILTER (WHERE {_DELIVERED}) AS taken_ms,
                   arg_min(node, outcome_ms) FILTER (WHERE {_DELIVERED}) AS node,
                   arg_min(coalesce(reason, 'unknown'), outcome_ms) FILTER (WHERE {_DEAD})
                       AS dead_reason,
                   bool_or({_DEAD}) AS dead,
                   bool_or(outcome = '{Outcome.FILTERED}') AS filtered,
                   bool_or(outcome IN ('{Outcome.HANDED_OFF}', '{Outcome.RE_OFFERED}')) AS handed
            FROM outcomes GROUP BY dest, topic, "partition", "offset"
        ), joined AS (
            SELECT e.*, coalesce(f.deliveries, 0) AS deliveries, f.first_2xx_ms,
                   f.last_outcome_ms, f.taken_ms, f.node, f.dead_reason,
                   CASE WHEN coalesce(f.deliveries, 0) > 0 THEN 'delivered'
                        WHEN f.dead THEN 'dead_lettered'
                        WHEN f.filtered THEN 'filtered'
                        WHEN f.handed THEN 'in_retry'
                        ELSE 'missing' END AS status,
                   f.first_2xx_ms IS NOT NULL AND problem IS DISTINCT FROM 'time_future'
                       AS lag_ok
            FROM e LEFT JOIN f USING (dest, topic, "partition", "offset")
            WHERE e.minute_ms >= {window.from_ms} AND e.minute_ms < {window.to_ms}
        )
        SELECT *, greatest(deliveries - 1, 0) AS duplicates,
               CASE WHEN lag_ok THEN least(greatest(first_2xx_ms - event_time_ms, 0), {LAG_MAX_MS})
                    END AS lag_ms,
               CASE WHEN lag_ok AND taken_ms > 0
                         AND event_time_ms <= taken_ms + {FUTURE_TOLERANCE_MS}
                    THEN taken_ms - event_time_ms END AS lag_in_ms,
               CASE WHEN lag_ok AND taken_ms > 0
                         AND event_time_ms <= taken_ms + {FUTURE_TOLERANCE_MS}
                    THEN first_2xx_ms - taken_ms END AS process_ms
        FROM joined"""
    )

    def count(status: str) -> str:
        return f"count(*) FILTER (WHERE status = '{status}') AS {status}"

    # the settle_s in force per destination and minute: the latest version from before the
    # minute, else the destination's first one, else the default
    rows = _dicts(
        con.execute(
            f"""WITH firsts AS (
                SELECT dest, arg_min(settle_ms, from_ms) AS settle_ms FROM settle GROUP BY dest
            ), minutes AS (
                SELECT DISTINCT p.dest, p.minute_ms FROM per_origin p
            ), settled AS (
                SELECT m.dest, m.minute_ms,
                       coalesce(s.settle_ms, f.settle_ms, {default_settle_ms}) AS settle_ms
                FROM minutes m
                ASOF LEFT JOIN settle s ON m.dest = s.dest AND m.minute_ms >= s.from_ms
                LEFT JOIN firsts f ON m.dest = f.dest
            )
            SELECT p.dest, p.minute_ms, count(*) AS entered, {count("delivered")},
                   {count("dead_lettered")}, {count("filtered")}, {count("in_retry")},
                   {count("missing")}, sum(duplicates) AS duplicates,
                   count(*) FILTER (WHERE first_2xx_ms IS NOT NULL
                       AND first_2xx_ms <= p.minute_ms + {MINUTE_MS} + s.settle_ms) AS on_time,
                   max(greatest(kafka_ms, last_outcome_ms)) AS seen_ms_max,
                   quantile_disc(lag_ms, 0.5) AS lag_p50_ms,
                   quantile_disc(lag_ms, 0.95) AS lag_p95_ms,
                   quantile_disc(lag_ms, 0.99) AS lag_p99_ms,
                   quantile_disc(lag_in_ms, 0.95) AS lag_in_p95_ms,
                   quantile_disc(process_ms, 0.95) AS process_p95_ms
            FROM per_origin p JOIN settled s USING (dest, minute_ms)
            GROUP BY p.dest, p.minute_ms"""
        )
    )
    dead_by_reason: dict[tuple[str, int], dict[str, int]] = {}
    for dest, minute_ms, reason, n in con.execute(
        """SELECT dest, minute_ms, dead_reason, count(*) FROM per_origin
        WHERE status = 'dead_lettered' GROUP BY ALL"""
    ).fetchall():
        dead_by_reason.setdefault((dest, minute_ms), {})[reason] = n
    missing = con.sql(
        """SELECT dest, minute_ms, event_id, topic, "partition", "offset", event_time_ms
        FROM per_origin WHERE status = 'missing' ORDER BY dest, topic, "partition", "offset" """
    ).to_arrow_table()
    nodes = _dicts(
        con.execute(
            """SELECT dest, node, count(*) AS delivered,
                   quantile_disc(process_ms, 0.5) AS process_p50_ms,
                   quantile_disc(process_ms, 0.95) AS process_p95_ms,
                   quantile_disc(process_ms, 0.99) AS process_p99_ms
            FROM per_origin WHERE process_ms IS NOT NULL
            GROUP BY dest, node ORDER BY dest, node"""
        )
    )
    settled = _settled(con, root, window, only)
    return finish(rows, dead_by_reason, missing, nodes, versions, settled, lag_sla_s)


def _settled(con: Any, root: Path, window: Window, only: str) -> set[tuple[str, int]]:
    """Minutes the auditor archived as final."""
    if not any((root / str(Kind.MINUTES)).glob("dest=*/date=*/hour=*/*.parquet")):
        return set()
    found = con.execute(
        f"""SELECT DISTINCT dest, minute_ms FROM {_scan(root, Kind.MINUTES)}
        WHERE final AND date IN ({_list(window.dates())}) {only}"""
    ).fetchall()
    return {(dest, int(minute_ms)) for dest, minute_ms in found}


def _dicts(cursor: Any) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
