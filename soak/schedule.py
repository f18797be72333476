"""The soak's fault schedule: seeded, printed at the start, one fault after another and two overlapping.

Six faults an hour (`FAULTS_PER_HOUR`), each of one kind of `KINDS`, drawn so that every kind
comes before any comes twice. The run is cut into as many slots as faults; each fault starts at
a random point of its slot's first half, its length drawn from its kind's range. One fault
starts while the one before it still runs (the pair is drawn too). The run's first minute and
its last two (a tenth and a quarter of a shorter run) have none: the load settles in first, and
the pipeline drains before the account. A fault that would run into that end is cut short.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass

FAULTS_PER_HOUR = 6
QUIET_START_S = 60.0
QUIET_END_S = 120.0

KILL9 = "kill9"
SIGTERM_RESTART = "sigterm_restart"
MEMBER_JOIN_LEAVE = "member_join_leave"
BROKER_FROZEN = "broker_frozen"
DESTINATION_DOWN = "destination_down"
UNAUTHORIZED = "unauthorized"
REDIS_STOPPED = "redis_stopped"

#: each kind and how long it lasts (seconds, drawn uniformly); a kill lasts until the process
#: the supervisor starts again is ready, which the run measures
KINDS: dict[str, tuple[float, float]] = {
    KILL9: (0.0, 0.0),
    SIGTERM_RESTART: (0.0, 0.0),
    MEMBER_JOIN_LEAVE: (60.0, 120.0),  # the third member's time in the group
    BROKER_FROZEN: (5.0, 15.0),
    DESTINATION_DOWN: (30.0, 90.0),
    UNAUTHORIZED: (10.0, 30.0),  # every request answered 401
    REDIS_STOPPED: (30.0, 90.0),
}
#: the kinds that end a process: their target is drawn from the daemons that may be killed
PROCESS_KINDS = frozenset({KILL9, SIGTERM_RESTART})


@dataclass(frozen=True)
class PlannedFault:
    """A fault as planned: `kind` on `target` at `start_s` for `length_s` (0: until recovered)."""

    kind: str
    target: str
    start_s: float
    length_s: float

    def line(self) -> str:
        minutes, seconds = divmod(int(self.start_s), 60)
        length = f"{self.length_s:.0f} s" if self.length_s else "until ready again"
        return f"{minutes:02d}:{seconds:02d} {self.kind} {self.target} ({length})"


def plan(
    duration_s: float,
    seed: int,
    *,
    killable: list[str],
    faults: int | None = None,
    destinations: tuple[str, str] = ("plain", "tenants"),
    without: Collection[str] = (),
) -> list[PlannedFault]:
    """The schedule of a run of `duration_s`: `faults` of them (by default `FAULTS_PER_HOUR`
    for an hour, at least 2 so that two can overlap), process faults on one of `killable`, no
    fault of a kind in `without`."""
    rng = random.Random(seed)
    count = faults if faults is not None else max(2, round(FAULTS_PER_HOUR * duration_s / 3600))
    quiet_start_s = min(QUIET_START_S, duration_s * 0.1)
    end_s = duration_s - min(QUIET_END_S, duration_s * 0.25)
    window_s = end_s - quiet_start_s
    if count < 1 or window_s <= 0:
        return []
    kinds: list[str] = []
    while len(kinds) < count:  # drawn from every kind, so a seed's schedule is the same less them
        drawn = rng.sample(sorted(KINDS), len(KINDS))
        kinds.extend(kind for kind in drawn if kind not in without)
    slot_s = window_s / count
    overlapping = rng.randrange(1, count) if count >= 2 else None
    planned: list[PlannedFault] = []
    for index, kind in enumerate(kinds[:count]):
        low, high = KINDS[kind]
        length_s = rng.uniform(low, high)
        start_s = quiet_start_s + index * slot_s + rng.uniform(0.0, slot_s / 2)
        if index == overlapping:
            before = planned[-1]
            # within the fault before (a kill: right after it, while its process restarts)
            start_s = before.start_s + rng.uniform(0.2, 0.8) * max(before.length_s, 5.0)
        start_s = min(start_s, end_s - 1.0)
        length_s = round(min(length_s, end_s - start_s), 1)
        target = _target(kind, rng, killable, destinations)
        planned.append(PlannedFault(kind, target, round(start_s, 1), length_s))
    return sorted(planned, key=lambda fault: fault.start_s)


def _target(
    kind: str, rng: random.Random, killable: list[str], destinations: tuple[str, str]
) -> str:
    if kind in PROCESS_KINDS:
        return rng.choice(killable)
    if kind == MEMBER_JOIN_LEAVE:
        return f"connector-{destinations[0]}"
    if kind == BROKER_FROZEN:
        return "broker"
    if kind == REDIS_STOPPED:
        return "redis"
    return f"destination {rng.choice(destinations)}"
