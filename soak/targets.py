"""The targets a soak run is judged by (issue 45), each met, not met, or not measured.

The late minutes a fault may cost are its own and the next (`late_minute_budget`). A daemon's
RSS is judged by the line fitted through each life after its warm-up; the slope between faults
is shown beside it and decides nothing. A count (fds, threads, Kafka connections, tasks) is
flat when the least it was at the end of each life is no more than just after its warm-up
(`soak.resources.floors`): what is in flight comes and goes with the load, a leak stays. Its
fitted slope is shown beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from soak.model import Fault, Minute, Slope, SoakResult

#: the highest p95 lag a minute with no fault may have
P95_NO_FAULT_MAX_MS = 1_000.0
#: late minutes a fault may cause (those it overlaps and the one after it ends)
LATE_MINUTES_PER_FAULT_MAX = 2
#: a process life's RSS must grow slower than this
RSS_SLOPE_MAX_MB_PER_H = 5.0

#: what must stay flat: its name, its key in `Slope.floors`, its fitted slope
FLAT: tuple[tuple[str, str, Callable[[Slope], float | None]], ...] = (
    ("fds", "fds", lambda s: s.fds_per_h),
    ("threads", "threads", lambda s: s.threads_per_h),
    ("Kafka connections", "kafka_connections", lambda s: s.kafka_connections_per_h),
    ("tasks", "tasks", lambda s: s.tasks_per_h),
)


@dataclasses.dataclass(frozen=True)
class Target:
    target: str
    measured: str
    met: bool | None  # None: the run measured nothing to judge it by

    @property
    def verdict(self) -> str:
        return "not measured" if self.met is None else "met" if self.met else "not met"


def late_minutes_by_fault(result: SoakResult) -> dict[int, int]:
    """Fault index -> late minutes among those it overlaps and the one after it ends (a late
    minute within two overlapping faults counts for both)."""
    late = _late_spans(result)
    return {i: sum(1 for span in late if _may_cost(f, span)) for i, f in enumerate(result.faults)}


def _late_spans(result: SoakResult) -> list[tuple[float, float]]:
    return [minute_span_s(result, m.start_ms) for m in result.minutes if m.events and not m.on_time]


def _may_cost(fault: Fault, span: tuple[float, float], *, after_s: float = 60.0) -> bool:
    """Whether the minute `span` is one of the fault's own or starts within `after_s` of its end."""
    start_s, end_s = span
    return fault.start_s < end_s and start_s < fault.end_s + after_s


def minute_span_s(result: SoakResult, start_ms: int) -> tuple[float, float]:
    """The minute starting at `start_ms` as seconds since the run started."""
    start_s = (start_ms - result.started_ms) / 1000
    return start_s, start_s + 60


def late_minute_budget(result: SoakResult) -> dict[int, int]:
    """Fault index -> the late minutes it may cost: its own minutes and the next. A fault within
    one minute: 2 (`LATE_MINUTES_PER_FAULT_MAX`); one across a minute's end (a 69 s outage, or
    a 9 s one at 00:55): a minute more, since no event of an outage can be on time."""
    spans = [minute_span_s(result, m.start_ms) for m in result.minutes]
    own = {
        i: sum(1 for span in spans if _may_cost(f, span, after_s=0.0))
        for i, f in enumerate(result.faults)
    }
    return {i: max(count, 1) + LATE_MINUTES_PER_FAULT_MAX - 1 for i, count in own.items()}


def late_beyond_budget(result: SoakResult) -> int:
    """The late minutes no fault may cost (`late_minute_budget`): neither among a fault's own
    minutes nor the next after one; a fault whose late minutes run on, or a late quiet minute."""
    return sum(
        1 for span in _late_spans(result) if not any(_may_cost(f, span) for f in result.faults)
    )


def late_for_the_broker(result: SoakResult) -> tuple[Minute, ...]:
    """The late quiet minutes whose p95 the broker alone (`soak.probe`) took past `lag_sla_s`:
    in them no consumer of that broker could have been on time. A late quiet minute the broker
    answered in time is the pipeline's."""
    sla_ms = result.lag_sla_s * 1000
    return tuple(
        m
        for m in result.quiet_minutes
        if not m.on_time and m.broker_p95_ms is not None and m.broker_p95_ms > sla_ms
    )


def _the_broker(result: SoakResult) -> tuple[str, str]:
    """What the broker alone says of the quiet minutes: of the late ones, and of the worst."""
    quiet = result.quiet_minutes
    if not any(m.broker_p95_ms is not None for m in quiet):
        return "", ""
    late = sum(1 for m in quiet if not m.on_time)
    of_late = f"; the broker alone over {result.lag_sla_s * 1000:,.0f} ms in"
    of_late += f" {len(late_for_the_broker(result))} of the {late} late"
    worst = max(quiet, key=lambda m: m.p95_ms or 0.0)
    return of_late, f"; the broker alone {_ms(worst.broker_p95_ms)} ms in it"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def targets(result: SoakResult) -> list[Target]:
    """Every target of the issue, met or not, in the order REPORT.md lists them."""
    mismatches = result.account.audit_mismatches
    quiet = result.quiet_minutes
    by_fault = late_minutes_by_fault(result)
    worst = max(by_fault.values(), default=0)
    of_late, of_worst = _the_broker(result)
    return [
        Target("lost = 0", f"{result.account.lost:,}", result.account.lost == 0),
        Target("auditors agree", f"{len(mismatches):,} mismatches", not mismatches),
        Target(
            "on time with no fault = 100 %",
            f"{result.on_time_pct_no_fault:.1f} % of {len(quiet)} minutes{of_late}",
            all(m.on_time for m in quiet) if quiet else None,
        ),
        Target(
            f"p95 with no fault ≤ {P95_NO_FAULT_MAX_MS:,.0f} ms",
            f"{result.p95_no_fault_ms:,.0f} ms (the worst minute{of_worst})",
            result.p95_no_fault_ms <= P95_NO_FAULT_MAX_MS if quiet else None,
        ),
        Target(
            "late minutes ≤ a fault's own and the next, per fault",
            f"at most {worst} per fault; {result.late_minutes} in all"
            f" for {len(result.faults)} faults, {late_beyond_budget(result)} beyond them",
            not late_beyond_budget(result),
        ),
        _rss_target(result.daemon_slopes),
        *(_flat_target(name, key, per_h, result.daemon_slopes) for name, key, per_h in FLAT),
    ]


def _rss_target(slopes: Sequence[Slope]) -> Target:
    target = f"RSS slope < {RSS_SLOPE_MAX_MB_PER_H:g} MB/h per daemon"
    if not slopes:
        return Target(target, "no process life long enough", None)
    steepest = max(slopes, key=lambda s: s.rss_mb_per_h)
    measured = f"{steepest.rss_mb_per_h:+.1f} MB/h ({steepest.daemon} pid {steepest.pid})"
    between = [s for s in slopes if s.rss_mb_per_h_between_faults is not None]
    if between:  # a reading beside the target, not the verdict
        most = max(between, key=lambda s: s.rss_mb_per_h_between_faults or 0.0)
        measured += (
            f"; between faults at most {most.rss_mb_per_h_between_faults:+.1f} MB/h"
            f" ({most.daemon} pid {most.pid})"
        )
    return Target(target, measured, steepest.rss_mb_per_h < RSS_SLOPE_MAX_MB_PER_H)


def _flat_target(
    name: str, key: str, per_h: Callable[[Slope], float | None], slopes: Sequence[Slope]
) -> Target:
    target = f"{name} flat (least at the end ≤ after warm-up)"
    lives = [(s.floors[key], s) for s in slopes if key in s.floors]
    if not lives:
        return Target(target, "not sampled", None)
    floor, life = max(lives, key=lambda pair: pair[0].rise)
    rates = [rate for s in slopes if (rate := per_h(s)) is not None]
    fitted = f"; fitted at most {max(rates, key=abs):+.1f}/h" if rates else ""
    if floor.rise <= 0:
        return Target(target, f"flat (no life's least rose){fitted}", True)
    where = f"{life.daemon} pid {life.pid}: least {floor.first:,} → {floor.last:,}"
    if key == "fds" and (kinds := [(k, f) for k, f in life.fd_floors.items() if f.rise > 0]):
        where += "; of them " + ", ".join(f"{k} {f.first:,} → {f.last:,}" for k, f in kinds)
    return Target(target, f"+{floor.rise:,} ({where}){fitted}", False)
