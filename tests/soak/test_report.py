"""The soak's report: its targets met or not, its faults, its picture and its result.json."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

# matplotlib builds its font cache with `fc-list`, a process the quick tier's guard refuses
# inside a test: build it while this module is collected.
import matplotlib.font_manager  # noqa: F401
import orjson

from soak.__main__ import problems
from soak.model import BROKER, Account, Fault, Floor, Minute, Sample, Slope, SoakResult
from soak.picture import _draw_memory
from soak.report import write_report
from soak.targets import (
    late_beyond_budget,
    late_for_the_broker,
    late_minute_budget,
    late_minutes_by_fault,
)

STARTED_MS = 1_735_732_800_000  # 2025-01-01 12:00 UTC
KILL = Fault("kill9", "connector", 60.0, 61.5, "SIGKILL pid 100, ready again in 1.5 s")
DOWN = Fault("destination_down", "destination shop", 300.0, 420.0, "every request answered 503")
JOIN = Fault("member_join_leave", "connector", 360.0, 480.0, "a third member for 120 s")
FAULTS = (KILL, DOWN, JOIN)  # DOWN and JOIN overlap from 06:00 to 07:00


def _minute(index: int, *, on_time: bool = True) -> Minute:
    """Minute `index` of the run: 100 events/s, late only if not `on_time`."""
    start_s, end_s = index * 60.0, index * 60.0 + 60
    active = tuple(f"{f.kind} {f.target}" for f in FAULTS if f.active(start_s, end_s))
    p95_ms = 400.0 if on_time else 4_000.0
    return Minute(STARTED_MS + index * 60_000, 6_000, 120.0, p95_ms, p95_ms * 1.5, on_time, active)


def _samples() -> tuple[Sample, ...]:
    """Every 30 s for 12 minutes: the connector restarts (pid 100, then 101) at 01:00."""
    samples = []
    for tick in range(24):
        at_s = tick * 30.0
        connector_pid = 100 if at_s < 60 else 101
        samples.append(Sample(at_s, "connector", connector_pid, 80.0 + tick * 0.1, 40, 9, 3, 25))
        samples.append(Sample(at_s, "retrier", 200, 60.0, 30, 7, 2, None))
    return tuple(samples)


def _level(fds: int, threads: int, connections: int, tasks: int | None) -> dict[str, Floor]:
    """Floors of counts that stayed where they were."""
    counts = {"fds": fds, "threads": threads, "kafka_connections": connections, "tasks": tasks}
    return {name: Floor(n, n) for name, n in counts.items() if n is not None}


def _result(**changes: Any) -> SoakResult:
    """Twelve minutes, three faults; late only 07:00-08:00, under JOIN and just after DOWN."""
    account = Account(
        accepted=72_000,
        delivered=71_997,
        lost=0,
        duplicates=2,
        written_again=1,
        dead_lettered={"malformed": 3},
        duplicate_causes={"kill9 connector": 2},
    )
    result = SoakResult(
        started_ms=STARTED_MS,
        seed=7,
        duration_s=720.0,
        lag_sla_s=2.0,
        capacity_events_per_s=400.0,
        rate_events_per_s=100.0,
        faults=FAULTS,
        minutes=tuple(_minute(i, on_time=i != 7) for i in range(12)),
        samples=_samples(),
        slopes=(
            Slope("connector", 101, 660.0, 1.2, 0.1, 0.0, 0.0, 0.2, floors=_level(40, 9, 3, 25)),
            Slope("retrier", 200, 720.0, 0.4, 0.0, 0.0, 0.0, None, floors=_level(30, 7, 2, None)),
        ),
        account=account,
        exits={"connector": 1},
    )
    return dataclasses.replace(result, **changes)


def _verdicts(report: str) -> dict[str, str]:
    """The Targets table of REPORT.md: target -> met, not met or not measured."""
    section = report.split("## Targets", 1)[1].split("\n\n", 2)[1]
    rows = [line.strip("| ").split(" | ") for line in section.splitlines()[2:]]
    return {row[0]: row[-1] for row in rows}


def test_the_report_holds_the_summary_line_and_every_fault(tmp_path: Path) -> None:
    """REPORT.md carries the summary line and a row for each fault, with its kind and detail."""
    result = _result()
    report = write_report(result, tmp_path).read_text()
    assert report.startswith("# Soak of 2025-01-01 12:00:00 UTC")
    assert f"```\n{result.summary_line()}\n```" in report
    faults = report.split("## Faults", 1)[1].split("## Account", 1)[0]
    for fault in FAULTS:
        assert f"| {fault.kind} | {fault.target} |" in faults
        assert fault.detail in faults


def test_a_clean_run_meets_every_target(tmp_path: Path) -> None:
    """Nothing lost, auditors agreeing, quiet minutes on time, one late minute per fault and
    flat resources: every target is met."""
    verdicts = _verdicts(write_report(_result(), tmp_path).read_text())
    assert len(verdicts) == 10
    assert set(verdicts.values()) == {"met"}


def test_a_lost_event_fails_its_target_and_no_other(tmp_path: Path) -> None:
    """One lost event: "lost = 0" is not met, its id is shown, every other target still is."""
    account = dataclasses.replace(_result().account, lost=1, lost_sample=("ev-42",))
    report = write_report(_result(account=account), tmp_path).read_text()
    verdicts = _verdicts(report)
    assert verdicts.pop("lost = 0") == "not met"
    assert set(verdicts.values()) == {"met"}
    assert "- lost: 1 (for example `ev-42`)" in report


def test_late_minutes_with_no_fault_and_a_growing_count_fail_their_targets(tmp_path: Path) -> None:
    """Late minutes long after every fault fail "on time with no fault", its p95 and, past the
    faults' own minutes and the next of each in all, the late minutes' target though no fault
    has more than its own; threads that never fell back to where they were are not flat."""
    late = (1, 2, 3, 4, 7, 8, 9, 10, 11)
    minutes = tuple(_minute(i, on_time=i not in late) for i in range(12))
    floors = {**_level(40, 9, 3, 25), "threads": Floor(9, 12)}
    slopes = (Slope("connector", 101, 660.0, 1.2, 0.1, 3.0, 0.0, 0.2, floors=floors),)
    result = _result(minutes=minutes, slopes=slopes)
    report = write_report(result, tmp_path).read_text()
    verdicts = _verdicts(report)
    assert late_minutes_by_fault(result) == {0: 2, 1: 1, 2: 2}
    assert late_minute_budget(result) == {0: 2, 1: 3, 2: 3}  # DOWN and JOIN cross a minute's end
    assert late_beyond_budget(result) == 5  # 02:00-05:00 and 09:00-12:00
    assert verdicts["late minutes ≤ a fault's own and the next, per fault"] == "not met"
    assert verdicts["on time with no fault = 100 %"] == "not met"
    assert verdicts["p95 with no fault ≤ 1,000 ms"] == "not met"
    assert verdicts["threads flat (least at the end ≤ after warm-up)"] == "not met"
    assert verdicts["fds flat (least at the end ≤ after warm-up)"] == "met"
    assert "+3 (connector pid 101: least 9 → 12); fitted at most +3.0/h" in report


def test_late_quiet_minutes_say_which_the_broker_alone_made_late(tmp_path: Path) -> None:
    """The probe's bare consumer beside each minute: a late quiet minute whose p95 the broker
    alone took past the SLA is the broker's, one it answered in time is the pipeline's. The
    verdicts do not move: the targets are judged by the lag delivered."""
    late = (10, 11)
    broker_ms = {10: 2_500.0, 11: 300.0}  # the SLA is 2 s
    minutes = tuple(
        dataclasses.replace(_minute(i, on_time=i not in late), broker_p95_ms=broker_ms.get(i, 90.0))
        for i in range(12)
    )
    result = _result(minutes=minutes)
    assert [m.start_ms for m in late_for_the_broker(result)] == [STARTED_MS + 10 * 60_000]
    report = write_report(result, tmp_path).read_text()
    targets = dict(
        (row[0], row[1])
        for line in report.split("## Targets", 1)[1].split("\n\n", 2)[1].splitlines()[2:]
        if (row := line.strip("| ").split(" | "))
    )
    assert targets["on time with no fault = 100 %"].endswith(
        "; the broker alone over 2,000 ms in 1 of the 2 late"
    )
    assert targets["p95 with no fault ≤ 1,000 ms"] == (
        "4,000 ms (the worst minute; the broker alone 2,500 ms in it)"
    )
    assert _verdicts(report)["on time with no fault = 100 %"] == "not met"
    minutes_table = report.split("## Minutes", 1)[1]
    assert "| the broker alone: p95 (ms) |" in minutes_table
    assert "| 2,500 |" in minutes_table
    unprobed = write_report(_result(), tmp_path / "unprobed").read_text()
    assert "the broker alone" not in unprobed.split("## Minutes", 1)[0]


def test_a_count_is_flat_by_the_least_it_held_not_by_its_fitted_slope(tmp_path: Path) -> None:
    """Connections in flight that grew with the answer times climb as fitted and fall back at
    rest: flat. One fd more at rest than after warm-up, however small its slope, is not."""
    in_flight = Slope("ingest", 400, 3600.0, 0.3, 4.2, 0.0, 0.0, 2.0, floors=_level(18, 6, 2, 9))
    in_flight = dataclasses.replace(in_flight, floors={**in_flight.floors, "fds": Floor(18, 17)})
    verdicts = _verdicts(write_report(_result(slopes=(in_flight,)), tmp_path / "a").read_text())
    assert verdicts["fds flat (least at the end ≤ after warm-up)"] == "met"
    leaked = dataclasses.replace(
        in_flight, fds_per_h=0.1, floors={**in_flight.floors, "fds": Floor(18, 19)}
    )
    report = write_report(_result(slopes=(leaked,)), tmp_path / "b").read_text()
    assert _verdicts(report)["fds flat (least at the end ≤ after warm-up)"] == "not met"
    assert "| ingest | 400 | 60 | +0.30 | - | +0.10; 18 → 19 |" in report


def test_the_dev_brokers_growth_is_shown_beside_the_daemons_not_judged_with_them(
    tmp_path: Path,
) -> None:
    """The broker keeps every record (Tansu has no retention): its slopes are in the table, but
    the summary's and the targets' figures are the daemons'."""
    broker = Slope(BROKER, 90, 720.0, 4_396.7, 2.0, 0.0, 0.0, None)
    result = _result(slopes=(*_result().slopes, broker))
    report = write_report(result, tmp_path).read_text()
    verdicts = _verdicts(report)
    assert result.rss_slope_mb_per_h == 1.2
    assert result.fds_slope_per_h == 0.1
    assert "rss_slope_mb_per_h=1.2 fds_slope_per_h=0.1" in result.summary_line()
    assert verdicts["RSS slope < 5 MB/h per daemon"] == "met"
    assert verdicts["fds flat (least at the end ≤ after warm-up)"] == "met"
    assert "| broker | 90 | 12 | +4396.70 |" in report.split("## Resources", 1)[1]


def test_the_account_and_resources_show_duplicates_dead_letters_and_a_restart(
    tmp_path: Path,
) -> None:
    """Duplicates by cause, dead letters by reason, and the connector's restart (two pids)."""
    report = write_report(_result(), tmp_path).read_text()
    assert "- duplicates: 2 (0.003 % of delivered)" in report
    assert "- written to Kafka again: 1 records beyond an id's first" in report
    assert "| kill9 connector | 2 |" in report
    assert "| malformed | 3 |" in report
    assert "| connector | 1 | 80.0 → 82.3 | 40 → 40 |" in report
    assert "| retrier | 0 | 60.0 → 60.0 |" in report


def test_the_picture_is_a_png_12_by_9_inches_at_110_dpi(tmp_path: Path) -> None:
    """report.png is a PNG of 12 x 9 in at 110 dpi with something drawn in it."""
    write_report(_result(), tmp_path)
    picture = (tmp_path / "report.png").read_bytes()
    assert picture.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(picture[16:20], "big"), int.from_bytes(picture[20:24], "big")
    assert (width, height) == (1320, 990)
    assert len(picture) > 25_000  # axes and text alone; the lines, bands and legends add more


def test_the_brokers_memory_has_an_axis_of_its_own() -> None:
    """The dev broker's gigabytes go on the right axis: the daemons' megabytes stay readable."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    broker = tuple(
        Sample(t * 30.0, BROKER, 90, 300.0 + t * 250, 48, 22, 0, None) for t in range(24)
    )
    _figure, axes = plt.subplots()
    try:
        broker_axes = _draw_memory((*_samples(), *broker), axes)
        assert broker_axes is not None
        assert axes.get_ylim()[1] < 100  # the daemons: 60-82 MB
        assert broker_axes.get_ylim()[1] > 6_000
        assert [line.get_label() for line in broker_axes.get_lines()] == [BROKER]
        assert _draw_memory(_samples(), plt.subplots()[1]) is None
    finally:
        plt.close("all")


def test_result_json_holds_the_run_and_its_figures(tmp_path: Path) -> None:
    """result.json holds the whole result and the figures the model computes from it."""
    result = _result()
    write_report(result, tmp_path)
    document = orjson.loads((tmp_path / "result.json").read_bytes())
    assert tuple(Fault(**fault) for fault in document["faults"]) == FAULTS
    assert len(document["minutes"]) == 12
    assert document["account"]["dead_lettered"] == {"malformed": 3}
    assert document["exits"] == {"connector": 1}
    figures = document["figures"]
    assert figures["late_minutes"] == result.late_minutes == 1
    assert figures["late_minutes_by_fault"] == [0, 1, 1]
    assert figures["on_time_pct_no_fault"] == result.on_time_pct_no_fault == 100.0
    assert figures["p95_no_fault_ms"] == result.p95_no_fault_ms == 400.0
    assert figures["rss_slope_mb_per_h"] == result.rss_slope_mb_per_h == 1.2
    assert figures["dup_pct"] == result.account.dup_pct


def test_a_late_minute_right_after_a_fault_counts_for_it_and_not_for_one_long_over() -> None:
    """A late minute counts for the faults it overlaps and the one that ended just before it,
    not for a fault that ended earlier."""
    assert late_minutes_by_fault(_result()) == {0: 0, 1: 1, 2: 1}  # 07:00-08:00
    minutes = tuple(_minute(i, on_time=i not in (7, 8)) for i in range(12))
    assert late_minutes_by_fault(_result(minutes=minutes)) == {0: 0, 1: 1, 2: 2}
    minutes = tuple(_minute(i, on_time=i not in (7, 9)) for i in range(12))
    assert late_minutes_by_fault(_result(minutes=minutes)) == {0: 0, 1: 1, 2: 1}


def test_a_fault_across_a_minutes_end_may_cost_its_two_minutes_and_the_next(
    tmp_path: Path,
) -> None:
    """DOWN (05:00-07:00) and JOIN (06:00-08:00) each own two minutes: all of 05:00-09:00 late
    is within their budgets, one late minute more is not."""
    minutes = tuple(_minute(i, on_time=i not in (5, 6, 7, 8)) for i in range(12))
    result = _result(minutes=minutes, exits={})
    assert late_minutes_by_fault(result) == {0: 0, 1: 3, 2: 3}
    assert late_beyond_budget(result) == 0
    target = "late minutes ≤ a fault's own and the next, per fault"
    within = write_report(result, tmp_path / "within").read_text()
    assert _verdicts(within)[target] == "met"
    assert (
        "| destination_down | destination shop | 05:00 | 07:00 | 120.0 | 3 of at most 3 |" in within
    )
    assert problems(result) == []
    minutes = tuple(_minute(i, on_time=i not in (5, 6, 7, 8, 9)) for i in range(12))
    result = _result(minutes=minutes, exits={})
    assert _verdicts(write_report(result, tmp_path / "over").read_text())[target] == "not met"
    assert problems(result) == [
        "5 late minutes, 1 more than the faults' own minutes and the next of each"
    ]


def test_the_rss_target_is_judged_by_the_fit_and_shows_the_slope_between_faults(
    tmp_path: Path,
) -> None:
    """A step a backlog left fails the target as fitted; the reading between faults is beside
    it, in the target's row and the daemon's row, and decides nothing."""
    stepped = Slope("auditor-plain", 300, 3600.0, 25.5, 0.0, 0.0, 0.0, 0.0, 0.4)
    report = write_report(_result(slopes=(stepped,)), tmp_path).read_text()
    assert _verdicts(report)["RSS slope < 5 MB/h per daemon"] == "not met"
    assert (
        "+25.5 MB/h (auditor-plain pid 300); between faults at most +0.4 MB/h"
        " (auditor-plain pid 300)"
    ) in report
    assert "| auditor-plain | 300 | 60 | +25.50 | +0.40 |" in report
