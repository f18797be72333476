"""The reconciliation on one local Spark session, over archives the tests write themselves."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.percentiles import nearest_rank
from hifi.vocabulary import Outcome, Reason
from spark_batch.archive_input import ArchiveInputError, Window
from spark_batch.reconcile import Reconciled, reconcile
from tests.spark_batch.support import T0, TOPIC, Built, minute

pytestmark = [pytest.mark.spark]
HOUR = Window(T0, T0 + 60 * MINUTE_MS)


def _rows(result: Reconciled) -> dict[int, dict[str, Any]]:
    return {row["minute_ms"]: row for row in result.minutes}


def test_loss_is_the_set_difference_by_id(spark: Any, tmp_path: Path) -> None:
    """Ten events: 6 delivered, 1 dead letter, 1 filtered, 1 in retry, 1 with no outcome: that
    one is missing, named by id and origin; a minute far later makes the first one final."""
    built = Built(tmp_path)
    m0 = minute(0)
    built.enter(m0, list(range(10)))
    built.fact(Outcome.DELIVERED, [0, 1, 2, 3, 4, 5], at_ms=m0 + 1500, minute_ms=m0)
    built.fact(Outcome.DEAD_LETTERED, [6], at_ms=m0 + 1500, minute_ms=m0, reason=Reason.HTTP_4XX)
    built.fact(Outcome.FILTERED, [7], at_ms=m0 + 1500, minute_ms=m0)
    built.fact(Outcome.HANDED_OFF, [8], at_ms=m0 + 1500, minute_ms=m0)
    built.enter(minute(5), [10])  # the archive reaches past m0's settle time
    built.close()
    result = reconcile(spark, str(tmp_path), HOUR)
    row = _rows(result)[m0]
    counts = {
        k: row[k]
        for k in ("entered", "delivered", "dead_lettered", "filtered", "in_retry", "missing")
    }
    assert counts == {
        "entered": 10,
        "delivered": 6,
        "dead_lettered": 1,
        "filtered": 1,
        "in_retry": 1,
        "missing": 1,
    }
    assert row["dead_lettered_by_reason"] == {"http_4xx": 1}
    assert row["missing_ids"] == [f"{TOPIC}-0-9"]
    assert (row["final"], row["up"], row["down_reason"]) == (True, False, "loss")
    assert result.missing.to_pylist() == [
        {
            "dest": "shop",
            "minute_ms": m0,
            "event_id": f"{TOPIC}-0-9",
            "topic": TOPIC,
            "partition": 0,
            "offset": 9,
            "event_time_ms": m0 + 1000,
        },
        {
            "dest": "shop",
            "minute_ms": minute(5),
            "event_id": f"{TOPIC}-0-10",
            "topic": TOPIC,
            "partition": 0,
            "offset": 10,
            "event_time_ms": minute(5) + 1000,
        },
    ]
    assert _rows(result)[minute(5)]["final"] is False  # the archive ends inside its settle time


def test_repeats_count_once_and_a_later_2xx_wins(spark: Any, tmp_path: Path) -> None:
    """Entered rows and a fact archived twice (crash repeats) count once; a second 2xx fact is a
    duplicate; a 2xx after a dead letter makes the event delivered."""
    built = Built(tmp_path)
    m0 = minute(0)
    built.enter(m0, [0, 1, 2])
    built.enter(m0, [0, 1, 2])  # the same rows again
    first = built.fact(Outcome.DELIVERED, [0, 1], at_ms=m0 + 1200, minute_ms=m0)
    built.again(first, m0)
    built.fact(Outcome.DELIVERED, [1], at_ms=m0 + 9000, minute_ms=m0)  # delivered again
    built.fact(Outcome.DEAD_LETTERED, [2], at_ms=m0 + 1300, minute_ms=m0, reason=Reason.HTTP_4XX)
    built.fact(Outcome.DELIVERED, [2], at_ms=m0 + 30_000, minute_ms=m0)  # replayed, accepted
    built.close()
    row = _rows(reconcile(spark, str(tmp_path), HOUR))[m0]
    assert (row["entered"], row["delivered"], row["dead_lettered"], row["duplicates"]) == (
        3,
        3,
        0,
        1,
    )
    assert row["dead_lettered_by_reason"] == {}


def test_lag_percentiles_are_exact_nearest_rank_over_first_deliveries(
    spark: Any, tmp_path: Path
) -> None:
    """1,000 events with random delivery times: p50/p95/p99 equal a plain-Python nearest rank
    over each event's first 2xx; lag-in and the process duration too; and the node's share."""
    rng = random.Random(11)
    built = Built(tmp_path, settle_s=600.0)
    m0 = minute(0)
    event_ms = m0 + 2000
    built.enter(m0, list(range(1000)), event_ms=event_ms)
    lags, process = [], []
    for offset in range(1000):
        lag = rng.randrange(5, 4000)
        taken = event_ms + rng.randrange(0, lag)
        built.fact(
            Outcome.DELIVERED,
            [offset],
            at_ms=event_ms + lag,
            minute_ms=m0,
            event_ms=event_ms,
            taken_ms=taken,
        )
        if offset % 10 == 0:  # a later duplicate: not the first delivery, no lag of its own
            built.fact(
                Outcome.DELIVERED,
                [offset],
                at_ms=event_ms + 50_000,
                minute_ms=m0,
                event_ms=event_ms,
                taken_ms=taken,
            )
        lags.append(lag)
        process.append(event_ms + lag - taken)
    built.close()
    result = reconcile(spark, str(tmp_path), HOUR)
    row = _rows(result)[m0]
    lags.sort()
    process.sort()
    assert [row["lag_p50_ms"], row["lag_p95_ms"], row["lag_p99_ms"]] == [
        nearest_rank(lags, 50),
        nearest_rank(lags, 95),
        nearest_rank(lags, 99),
    ]
    assert row["process_p95_ms"] == nearest_rank(process, 95)
    assert row["duplicates"] == 100
    [node] = result.nodes
    assert (node["node"], node["delivered"]) == ("connector@test:1", 1000)
    assert node["process_p99_ms"] == nearest_rank(process, 99)


def test_late_deliveries_make_a_minute_down_for_lag(spark: Any, tmp_path: Path) -> None:
    """A minute whose events were delivered after settle_s (an outage the retrier rode out) is
    down for lag, not loss; a minute delivered in time and a minute without events are up."""
    built = Built(tmp_path, settle_s=60.0)
    late, on_time = minute(0), minute(2)
    built.enter(late, list(range(20)))
    built.fact(Outcome.HANDED_OFF, list(range(20)), at_ms=late + 2000, minute_ms=late)
    built.fact(Outcome.DELIVERED, list(range(20)), at_ms=late + 10 * MINUTE_MS, minute_ms=late)
    built.enter(on_time, list(range(20, 40)))
    built.fact(Outcome.DELIVERED, list(range(20, 40)), at_ms=on_time + 1100, minute_ms=on_time)
    built.enter(minute(20), [40])
    built.close()
    rows = _rows(reconcile(spark, str(tmp_path), HOUR))
    assert (rows[late]["delivered"], rows[late]["missing"], rows[late]["up"]) == (20, 0, False)
    assert rows[late]["down_reason"] == "lag"
    assert (rows[on_time]["up"], rows[on_time]["down_reason"]) == (True, None)
    assert minute(1) not in rows  # no events: no row (the day's availability counts it up)


def test_the_archived_settings_judge_and_the_flag_overrides_the_sla(
    spark: Any, tmp_path: Path
) -> None:
    """lag_sla_s comes from the settings the auditor archived (here 5 s: a 2 s p95 is up);
    --lag-sla-s 1 makes the same minute down for lag."""
    built = Built(tmp_path, lag_sla_s=5.0)
    m0 = minute(0)
    built.enter(m0, [0, 1])
    built.fact(Outcome.DELIVERED, [0, 1], at_ms=m0 + 3000, minute_ms=m0)
    built.enter(minute(5), [2])
    built.close()
    assert _rows(reconcile(spark, str(tmp_path), HOUR))[m0]["up"] is True
    strict = _rows(reconcile(spark, str(tmp_path), HOUR, lag_sla_s=1.0))[m0]
    assert (strict["up"], strict["down_reason"], strict["lag_sla_s"]) == (False, "lag", 1.0)


def test_only_the_window_and_the_destination_asked_for(spark: Any, tmp_path: Path) -> None:
    """Rows of other destinations and of minutes outside the window are left out; a
    destination the archive does not hold is refused naming it."""
    other = Built(tmp_path, "other")
    other.enter(minute(0), [0])
    other.close()
    built = Built(tmp_path)
    built.enter(minute(0), [0, 1])
    built.enter(minute(70), [2])  # outside HOUR
    built.archive.take().write()
    result = reconcile(spark, str(tmp_path), HOUR, dests=["shop"])
    assert [(r["dest"], r["minute_ms"], r["entered"]) for r in result.minutes] == [
        ("shop", minute(0), 2)
    ]
    with pytest.raises(ArchiveInputError, match="no entered rows of destination nowhere"):
        reconcile(spark, str(tmp_path), HOUR, dests=["nowhere"])


def test_a_recreated_topic_is_counted_by_incarnation_old_files_as_the_first(
    spark: Any, tmp_path: Path
) -> None:
    """The topic re-created: offsets 0..4 again, in epoch 1, delivered but 4. Joined on the
    incarnation, each event is itself: no duplicate, the one missing named; the first
    incarnation's rows, in a file written before `topic_epoch` existed, read as epoch 0."""
    built = Built(tmp_path)
    m0, m2 = minute(0), minute(2)
    built.enter(m0, list(range(10)))
    built.close()
    for path in (tmp_path / "entered").rglob("*.parquet"):  # as an older auditor wrote it
        pq.write_table(pq.ParquetFile(path).read().drop_columns(["topic_epoch"]), path)
    built = Built(tmp_path)
    built.fact(Outcome.DELIVERED, list(range(10)), at_ms=m0 + 1500, minute_ms=m0)
    built.enter(m2, list(range(5)), epoch=1, ids=[f"new-{o}" for o in range(5)])
    built.fact(Outcome.DELIVERED, [0, 1, 2, 3], at_ms=m2 + 1500, minute_ms=m2, epoch=1)
    built.enter(minute(8), [10], epoch=1)  # the archive reaches past m2's settle time
    built.close()
    rows = _rows(reconcile(spark, str(tmp_path), HOUR))
    first, second = rows[m0], rows[m2]
    figures = ("entered", "delivered", "missing", "duplicates")
    assert {k: first[k] for k in figures} == {
        "entered": 10,
        "delivered": 10,
        "missing": 0,
        "duplicates": 0,
    }
    assert {k: second[k] for k in figures} == {
        "entered": 5,
        "delivered": 4,
        "missing": 1,
        "duplicates": 0,
    }
    assert second["missing_ids"] == ["new-4"]
