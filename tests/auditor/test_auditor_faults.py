"""The auditor's tables under faults (an outage, a slow minute, bad input, kill -9) and `auditor report` on them.

All of it is read from one run (`tests/auditor/story.py`): two minutes of real time shared by
every test here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from devstack.kafka_tools import dead_letters
from hifi.accounting.tables import parse_minute, report_row
from hifi.kafka.settings import KafkaSettings
from spark_batch.archive_input import Window
from spark_batch.reconcile import reconcile
from tests.auditor.story import (
    EXPIRING_EVENTS,
    FAST_BATCH,
    FUTURE,
    GOOD_ODD,
    NO_ID,
    OUTAGE_EVENTS,
    PAST,
    REFUSALS,
    SLOW_EVENTS,
    Story,
    staged,
)
from tests.auditor.support import (
    COUNTS,
    JUDGEMENT,
    by_minute,
    differences,
    now_ms,
    rows_of,
    run_auditor_command,
    sample,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(480)]

REFUSED = "hifi_auditor_refused_facts_total"
ODD = "hifi_auditor_odd_records_total"


@pytest.fixture(scope="module")
async def story(
    kafka_settings: KafkaSettings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Story]:
    before = {reason: sample(REFUSED, {"reason": reason}) for reason in REFUSALS}
    async with staged(kafka_settings, tmp_path_factory.mktemp("story"), before) as told:
        yield told


def _final(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["minute"]: row for row in rows if row["final"]}


async def _report(*args: str) -> Any:
    code, out, err = await run_auditor_command("report", *args, "--format", "json")
    assert code == 0, err
    return orjson.loads(out)


async def test_an_outage_past_settling_is_in_retry_then_delivered(story: Story) -> None:
    """Final while its destination is down, a minute has its events in retry, not missing; later all delivered."""
    when_final = story.outage_row_when_final
    assert when_final["minute"] == story.minute_a
    assert when_final["entered"] == OUTAGE_EVENTS
    assert when_final["delivered"] == 0
    assert when_final["in_retry"] == OUTAGE_EVENTS
    assert when_final["missing"] == 0
    assert (when_final["up"], when_final["down_reason"]) == (False, "lag")  # late, not lost
    now = _final(rows_of(story.live, story.outage))[story.minute_a]
    assert now["delivered"] == OUTAGE_EVENTS
    assert (now["in_retry"], now["missing"], now["dead_lettered"]) == (0, 0, 0)


async def test_a_minute_answered_after_2_s_is_down_for_lag_the_next_up(story: Story) -> None:
    """With lag_sla_s 1, the minute answered after 2 s is down for lag; the one answered at once is up."""
    rows = _final(rows_of(story.live, story.lag))
    slow, fast = rows[story.minute_a], rows[story.minute_b]
    assert (slow["entered"], slow["delivered"], slow["missing"]) == (SLOW_EVENTS, SLOW_EVENTS, 0)
    assert slow["lag_p95_ms"] >= 2000
    assert (slow["up"], slow["down_reason"]) == (False, "lag")
    assert (fast["entered"], fast["delivered"], fast["missing"]) == (2 * FAST_BATCH,) * 2 + (0,)
    assert fast["lag_p95_ms"] <= 1000
    assert (fast["up"], fast["down_reason"]) == (True, None)


async def test_events_expired_by_the_retrier_are_dead_lettered_not_in_retry(
    story: Story, kafka_settings: KafkaSettings
) -> None:
    """Events whose retry tiers ran out count as dead-lettered (expired) in their minute, as in the DLQ."""
    dead = await dead_letters(kafka_settings, story.expiry)
    assert set(dead.values()) == {"expired"}
    assert len(dead) == EXPIRING_EVENTS
    row = _final(rows_of(story.live, story.expiry))[story.minute_a]
    assert row["dead_lettered_by_reason"] == {"expired": EXPIRING_EVENTS}
    assert (row["entered"], row["in_retry"], row["missing"]) == (EXPIRING_EVENTS, 0, 0)


async def test_bad_input_is_counted_by_reason_and_the_rest_stays_right(story: Story) -> None:
    """Unusable facts and odd events are counted by reason; the odd minute holds exactly its events, delivered."""
    refused = {r: sample(REFUSED, {"reason": r}) - story.refused_before[r] for r in REFUSALS}
    assert refused == REFUSALS
    problems = {
        p: sample(ODD, {"dest": story.odd, "problem": p})
        for p in ("no_id", "time_past", "time_future", "malformed")
    }
    assert problems == {"no_id": NO_ID, "time_past": PAST, "time_future": FUTURE, "malformed": 0}
    rows = rows_of(story.live, story.odd)
    assert [row["minute"] for row in rows] == [story.minute_a]  # by Kafka time, none years away
    total = GOOD_ODD + NO_ID + PAST + FUTURE
    row = rows[0]
    assert (row["entered"], row["delivered"], row["dead_lettered"]) == (total, total, 0)
    assert (row["in_retry"], row["missing"], row["final"]) == (0, 0, True)
    assert not story.live_task.done()


async def test_a_killed_auditor_counts_the_same_events(story: Story) -> None:
    """Killed, and restarted after its minutes should have settled, its counts equal a live one's."""
    assert story.process.starts == 3
    assert story.names
    for dest in story.names:
        restarted = by_minute(story.process_rows[dest], COUNTS)
        uninterrupted = by_minute(rows_of(story.live, dest), COUNTS)
        assert uninterrupted, f"{dest}: the live auditor has no minute with events"
        assert all(row["final"] for row in uninterrupted.values()), dest
        assert differences(restarted, uninterrupted) == {}, dest


async def test_a_killed_auditor_judges_its_minutes_the_same(story: Story) -> None:
    """Killed, and restarted after its minutes should have settled, its lags and up/down equal a live one's."""
    assert story.names
    judged: set[object] = set()
    for dest in story.names:
        restarted = by_minute(story.process_rows[dest], JUDGEMENT)
        uninterrupted = by_minute(rows_of(story.live, dest), JUDGEMENT)
        assert uninterrupted, f"{dest}: the live auditor has no minute with events"
        assert all(row["up"] is not None for row in uninterrupted.values()), dest  # judged
        judged |= {row["up"] for row in uninterrupted.values()}
        assert differences(restarted, uninterrupted) == {}, dest
    assert judged == {True, False}  # the story has minutes up and minutes down


async def _health(url: str) -> dict[str, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=10) as client:
        status = (await client.get(f"{url}/status")).json()
    return {dest: found["health"] for dest, found in status["dests"].items()}


async def test_health_counts_the_connectors_failed_batches_and_knows_the_last_2xx(
    story: Story,
) -> None:
    """During the outage batches failed and then 2xx came back; the destination that never
    answered 2xx has only failed batches; a killed auditor knows the same last 2xx."""
    live = await _health(story.live_url)
    outage = live[story.outage]
    assert outage["last_delivered_ms"] > parse_minute(story.minute_b)  # after the outage
    assert 0 < outage["failed_batches"] < outage["batches"]
    assert 0 < outage["failed_events"] < outage["events"]
    assert outage["failed_event_share"] == round(outage["failed_events"] / outage["events"], 4)
    expiry = live[story.expiry]
    assert expiry["last_delivered_ms"] is None
    assert expiry["failed_batches"] == expiry["batches"]
    assert expiry["failed_events"] == expiry["events"]
    restarted = await _health(story.process.url)
    for dest in story.names:
        assert restarted[dest]["last_delivered_ms"] == live[dest]["last_delivered_ms"], dest


async def test_report_from_the_archive_equals_the_running_auditor(story: Story) -> None:
    """`auditor report --archive` and `--url` give the same rows for final minutes."""
    for dest in (story.lag, story.odd):
        from_url = _final(await _report("--dest", dest, "--url", story.live_url))
        archive = str(story.live_archive)
        from_archive = _final(await _report("--dest", dest, "--archive", archive))
        assert from_url
        assert from_archive == from_url, dest


async def test_a_final_minute_changed_by_a_late_outcome_is_archived_again(story: Story) -> None:
    """The outage minute, final while in retry and delivered later, reads the same from the archive as live."""
    dest = story.outage
    from_url = _final(await _report("--dest", dest, "--url", story.live_url))
    from_archive = _final(await _report("--dest", dest, "--archive", str(story.live_archive)))
    assert from_archive[story.minute_a] == from_url[story.minute_a]


async def test_availability_of_the_day(story: Story) -> None:
    """`report --availability --day` counts the day's final minutes, the slow one down for lag."""
    day = story.minute_a[:10]
    for source in (("--url", story.live_url), ("--archive", str(story.live_archive))):
        found = await _report("--dest", story.lag, *source, "--availability", "--day", day)
        minutes = found["minutes"]
        assert found["day"] == day
        assert minutes + found["pending_minutes"] + found["to_come_minutes"] == 1440
        assert (found["down_minutes"], found["down_for_lag"], found["down_for_loss"]) == (1, 1, 0)
        assert found["up_minutes"] == minutes - 1
        assert found["availability_pct"] == round(100 * (minutes - 1) / minutes, 4)
        assert found["all_up"] is False


async def test_report_on_a_destination_the_auditor_does_not_audit_fails(story: Story) -> None:
    """`report --url` for a destination the running auditor does not audit is one line on stderr, exit 2."""
    code, out, err = await run_auditor_command("report", "--dest", "nope", "--url", story.live_url)
    assert (code, out) == (2, "")
    assert (
        err == f"auditor report: --dest nope: the auditor at {story.live_url} does not audit it\n"
    )


@pytest.mark.spark
async def test_the_spark_recount_of_the_archive_equals_the_auditors_final_minutes(
    story: Story, spark: Any
) -> None:
    """The auditor process, killed twice with SIGKILL and then stopped (its archive closed):
    the Spark reconciliation of its archive, by event id, gives every final minute the same
    entered, delivered, dead-lettered (by reason), filtered, in-retry and missing counts as its
    own table; and no minute the auditor never saw."""
    story.process.stop()
    assert story.process_archive is not None
    first = min(parse_minute(row["minute"]) for rows in story.process_rows.values() for row in rows)
    window = Window(first - 3_600_000, now_ms() + 3_600_000)
    recount = reconcile(spark, str(story.process_archive), window, dests=list(story.names))
    counts = [c for c in COUNTS if c not in ("duplicates", "final")]
    for dest in story.names:
        theirs = {
            minute: row
            for minute, row in by_minute(story.process_rows[dest], [*counts, "final"]).items()
            if row["final"]
        }
        ours = by_minute(
            (report_row(row) for row in recount.minutes if row["dest"] == dest), [*counts, "final"]
        )
        assert set(ours) >= set(theirs), dest
        assert differences({m: ours[m] for m in theirs}, theirs) == {}, dest
