"""The reconciliation of a destination fed by an ingest stream: accepted rows counted as the
auditor counts them (`hifi/accounting/accepted.py`, docs/accounting.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hifi.accounting.buckets import MINUTE_MS
from hifi.vocabulary import Outcome
from spark_batch.archive_input import Window
from spark_batch.outputs import summarize
from spark_batch.reconcile import Reconciled, reconcile
from tests.spark_batch.support import T0, TOPIC, Built, minute

pytestmark = [pytest.mark.spark]
HOUR = Window(T0, T0 + 60 * MINUTE_MS)
INGEST = "ingest@test:1"
COUNTED = ("entered", "accepted", "delivered", "in_retry", "missing")


def _rows(result: Reconciled) -> dict[int, dict[str, Any]]:
    return {row["minute_ms"]: row for row in result.minutes}


def _counts(row: dict[str, Any]) -> dict[str, int]:
    return {k: row[k] for k in COUNTED}


def _ingested(built: Built, *, accepting: bool) -> None:
    """Partition 0: 0-2 entered in minute 0; accepted: 1-2 (their event time in minute 1, as
    another destination's field would have it: they follow their entry), 3-4 never seen
    entering, 5 with an event time over a minute after its arrival (counts in its arrival's
    minute); delivered 0-3 and 5: 4 is missing. Partition 1: 10-11 entered and delivered, 8
    accepted below the first offset seen entering (not counted). Partition 2: accepted only,
    never seen entering (not counted). A later entry makes minute 0 final."""
    m0, m1 = minute(0), minute(1)
    built.enter(m0, [0, 1, 2])
    built.enter(m0, [10, 11], partition=1)
    if accepting:
        built.fact(Outcome.ACCEPTED, [1, 2], at_ms=m0 + 1100, minute_ms=m1, node=INGEST)
        built.fact(Outcome.ACCEPTED, [3, 4], at_ms=m0 + 1100, minute_ms=m0, node=INGEST)
        built.fact(
            Outcome.ACCEPTED,
            [5],
            at_ms=m0 + 2100,
            minute_ms=minute(3),
            event_ms=minute(3) + 1000,
            taken_ms=m0 + 2000,
            node=INGEST,
        )
        built.fact(
            Outcome.ACCEPTED, [8, 10, 11], at_ms=m0 + 1100, minute_ms=m0, partition=1, node=INGEST
        )
        built.fact(Outcome.ACCEPTED, [0], at_ms=m0 + 1100, minute_ms=m0, partition=2, node=INGEST)
    built.fact(Outcome.DELIVERED, [0, 1, 2, 3], at_ms=m0 + 1500, minute_ms=m0)
    built.fact(
        Outcome.DELIVERED, [5], at_ms=m0 + 2500, minute_ms=minute(3), event_ms=minute(3) + 1000
    )
    built.fact(Outcome.DELIVERED, [10, 11], at_ms=m0 + 1500, minute_ms=m0, partition=1)
    built.enter(minute(5), [20])  # the archive reaches past minute 0's settle time
    built.close()


def test_accepted_events_count_and_missing_counts_from_them(spark: Any, tmp_path: Path) -> None:
    """An accepted event delivered without an entry is delivered, one neither entered nor
    delivered is missing (named by origin); accepted ones that entered follow their entry."""
    _ingested(Built(tmp_path), accepting=True)
    result = reconcile(spark, str(tmp_path), HOUR)
    rows = _rows(result)
    assert _counts(rows[minute(0)]) == {
        "entered": 5,  # 0-2, 10-11
        "accepted": 7,  # 1-5, 10-11: not 8 (below the first offset), nor partition 2's
        "delivered": 7,  # 0-3, 5, 10-11
        "in_retry": 0,
        "missing": 1,  # 4
    }
    assert rows[minute(0)]["missing_ids"] == [f"{TOPIC}/0/4"]
    totals = summarize(result, HOUR, archive=str(tmp_path))["destinations"]["shop"]["totals"]
    assert totals["accepted"] == sum(row["accepted"] for row in rows.values()) == 7
    assert (rows[minute(0)]["final"], rows[minute(0)]["down_reason"]) == (True, "loss")
    assert minute(1) not in rows
    assert minute(3) not in rows
    missing = [row for row in result.missing.to_pylist() if row["minute_ms"] == minute(0)]
    assert missing == [
        {
            "dest": "shop",
            "minute_ms": minute(0),
            "event_id": None,
            "topic": TOPIC,
            "partition": 0,
            "offset": 4,
            "event_time_ms": minute(0) + 1000,
        }
    ]


def test_without_accepted_rows_nothing_changes(spark: Any, tmp_path: Path) -> None:
    """The same archive without accepted facts: counted from the entered events only, as
    before the ingest service, with `accepted` 0."""
    _ingested(Built(tmp_path), accepting=False)
    rows = _rows(reconcile(spark, str(tmp_path), HOUR))
    assert _counts(rows[minute(0)]) == {
        "entered": 5,
        "accepted": 0,
        "delivered": 5,
        "in_retry": 0,
        "missing": 0,
    }
    assert rows[minute(0)]["up"] is True
    assert _counts(rows[minute(5)])["missing"] == 1
