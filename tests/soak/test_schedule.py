"""The soak's fault schedule: seeded, every kind before a repeat, two overlapping, quiet ends."""

from __future__ import annotations

import itertools

import pytest

from soak import schedule

KILLABLE = ["connector-plain-b", "auditor-tenants"]


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    first = schedule.plan(3600, 11, killable=KILLABLE)
    assert first == schedule.plan(3600, 11, killable=KILLABLE)
    assert first != schedule.plan(3600, 12, killable=KILLABLE)


@pytest.mark.parametrize("seed", range(20))
def test_an_hour_has_six_faults_of_six_kinds_and_two_overlap(seed: int) -> None:
    planned = schedule.plan(3600, seed, killable=KILLABLE)
    assert len(planned) == schedule.FAULTS_PER_HOUR
    assert len({fault.kind for fault in planned}) == 6  # no kind twice before every kind once
    overlaps = [
        (a, b)
        for a, b in itertools.pairwise(planned)
        if b.start_s <= a.start_s + max(a.length_s, 5.0)
    ]
    assert overlaps, [fault.line() for fault in planned]
    assert planned[0].start_s >= schedule.QUIET_START_S
    assert all(f.start_s + f.length_s <= 3600 - schedule.QUIET_END_S for f in planned)
    for fault in planned:
        low, high = schedule.KINDS[fault.kind]
        assert low <= fault.length_s <= high
        if fault.kind in schedule.PROCESS_KINDS:
            assert fault.target in KILLABLE


def test_a_short_run_keeps_its_faults_inside_it() -> None:
    planned = schedule.plan(90, 3, killable=KILLABLE, faults=2)
    assert len(planned) == 2
    assert all(f.start_s >= 9.0 and f.start_s + f.length_s <= 90 - 22.5 for f in planned)
    assert schedule.plan(90, 3, killable=KILLABLE, faults=0) == []


@pytest.mark.parametrize("seed", range(10))
def test_a_kind_left_out_is_never_drawn_and_the_seed_keeps_the_faults_before_it(seed: int) -> None:
    everything = schedule.plan(3600, seed, killable=KILLABLE)
    without = schedule.plan(3600, seed, killable=KILLABLE, without=[schedule.BROKER_FROZEN])
    assert len(without) == schedule.FAULTS_PER_HOUR
    assert schedule.BROKER_FROZEN not in {fault.kind for fault in without}
    kinds = [fault.kind for fault in everything]
    before = kinds.index(schedule.BROKER_FROZEN) if schedule.BROKER_FROZEN in kinds else len(kinds)
    assert [f.kind for f in without[:before]] == kinds[:before]
