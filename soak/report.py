"""The soak's report: REPORT.md to read, report.png to look at, result.json to compare runs by.

REPORT.md opens with the targets the run is judged by, each met or not, then the detail."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from soak.model import Fault, Sample, Slope, SoakResult
from soak.picture import draw_picture
from soak.resources import RECOVERY_S

#: the highest p95 lag a minute with no fault may have
P95_NO_FAULT_MAX_MS = 1_000.0
#: late minutes a fault may cause (those it overlaps and the one after it ends)
LATE_MINUTES_PER_FAULT_MAX = 2
#: a process life's RSS must grow slower than this
RSS_SLOPE_MAX_MB_PER_H = 5.0
#: a count (fds, threads, connections, tasks) whose slope stays within this is flat
FLAT_MAX_PER_H = 1.0
#: audit mismatches listed in the report (result.json holds them all)
MISMATCHES_SHOWN = 20

#: what must stay flat: its name and how to read it off a Slope and off a Sample
_FLAT: tuple[tuple[str, Callable[[Slope], float | None], Callable[[Sample], int | None]], ...] = (
    ("fds", lambda s: s.fds_per_h, lambda s: s.fds),
    ("threads", lambda s: s.threads_per_h, lambda s: s.threads),
    ("Kafka connections", lambda s: s.kafka_connections_per_h, lambda s: s.kafka_connections),
    ("tasks", lambda s: s.tasks_per_h, lambda s: s.tasks),
)


@dataclasses.dataclass(frozen=True)
class _Target:
    target: str
    measured: str
    met: bool | None  # None: the run measured nothing to judge it by

    @property
    def verdict(self) -> str:
        return "not measured" if self.met is None else "met" if self.met else "not met"


def write_report(result: SoakResult, out_dir: Path) -> Path:
    """`REPORT.md`, `report.png` and `result.json` in `out_dir`; the path of `REPORT.md`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    draw_picture(result, out_dir / "report.png")
    document = {**dataclasses.asdict(_plain(result)), "figures": _figures(result)}
    options = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    (out_dir / "result.json").write_bytes(orjson.dumps(document, option=options))
    report = out_dir / "REPORT.md"
    report.write_text("\n".join(_markdown(result)) + "\n")
    return report


def late_minutes_by_fault(result: SoakResult) -> dict[int, int]:
    """Fault index -> late minutes among those it overlaps and the one after it ends (a late
    minute within two overlapping faults counts for both)."""
    late = _late_spans(result)
    return {i: sum(1 for span in late if _may_cost(f, span)) for i, f in enumerate(result.faults)}


def _late_spans(result: SoakResult) -> list[tuple[float, float]]:
    return [_span_s(result, m.start_ms) for m in result.minutes if m.events and not m.on_time]


def _may_cost(fault: Fault, span: tuple[float, float], *, after_s: float = 60.0) -> bool:
    """Whether the minute `span` is one of the fault's own or starts within `after_s` of its end."""
    start_s, end_s = span
    return fault.start_s < end_s and start_s < fault.end_s + after_s


def _figures(result: SoakResult) -> dict[str, Any]:
    """The figures the run is judged by, as result.json holds them under "figures"."""
    by_fault = late_minutes_by_fault(result)
    return {
        "late_minutes": result.late_minutes,
        "late_minutes_by_fault": [by_fault[i] for i in range(len(result.faults))],
        "on_time_pct": result.on_time_pct,
        "on_time_pct_no_fault": result.on_time_pct_no_fault,
        "p95_no_fault_ms": result.p95_no_fault_ms,
        "rss_slope_mb_per_h": result.rss_slope_mb_per_h,
        "fds_slope_per_h": result.fds_slope_per_h,
        "dup_pct": result.account.dup_pct,
    }


def _plain(result: SoakResult) -> SoakResult:
    """`result` with plain dicts for its mappings (asdict rebuilds a Counter or a defaultdict
    wrongly, and orjson writes only dicts)."""
    account = result.account
    return dataclasses.replace(
        result,
        exits=dict(result.exits),
        account=dataclasses.replace(
            account,
            dead_lettered=dict(account.dead_lettered),
            duplicate_causes=dict(account.duplicate_causes),
        ),
    )


def _span_s(result: SoakResult, start_ms: int) -> tuple[float, float]:
    """The minute starting at `start_ms` as seconds since the run started."""
    start_s = (start_ms - result.started_ms) / 1000
    return start_s, start_s + 60


def late_minute_budget(result: SoakResult) -> dict[int, int]:
    """Fault index -> the late minutes it may cost: its own minutes and the next. A fault within
    one minute: 2 (`LATE_MINUTES_PER_FAULT_MAX`); one across a minute's end (a 69 s outage, or
    a 9 s one at 00:55): a minute more, since no event of an outage can be on time."""
    spans = [_span_s(result, m.start_ms) for m in result.minutes]
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


def _targets(result: SoakResult) -> list[_Target]:
    mismatches = result.account.audit_mismatches
    quiet = result.quiet_minutes
    by_fault = late_minutes_by_fault(result)
    worst = max(by_fault.values(), default=0)
    return [
        _Target("lost = 0", f"{result.account.lost:,}", result.account.lost == 0),
        _Target("auditors agree", f"{len(mismatches):,} mismatches", not mismatches),
        _Target(
            "on time with no fault = 100 %",
            f"{result.on_time_pct_no_fault:.1f} % of {len(quiet)} minutes",
            all(m.on_time for m in quiet) if quiet else None,
        ),
        _Target(
            f"p95 with no fault ≤ {P95_NO_FAULT_MAX_MS:,.0f} ms",
            f"{result.p95_no_fault_ms:,.0f} ms (the worst minute)",
            result.p95_no_fault_ms <= P95_NO_FAULT_MAX_MS if quiet else None,
        ),
        _Target(
            "late minutes ≤ a fault's own and the next, per fault",
            f"at most {worst} per fault; {result.late_minutes} in all"
            f" for {len(result.faults)} faults, {late_beyond_budget(result)} beyond them",
            not late_beyond_budget(result),
        ),
        _rss_target(result.daemon_slopes),
        *(_flat_target(name, per_h, result.daemon_slopes) for name, per_h, _ in _FLAT),
    ]


def _rss_target(slopes: Sequence[Slope]) -> _Target:
    target = f"RSS slope < {RSS_SLOPE_MAX_MB_PER_H:g} MB/h per daemon"
    if not slopes:
        return _Target(target, "no process life long enough", None)
    steepest = max(slopes, key=lambda s: s.rss_mb_per_h)
    measured = f"{steepest.rss_mb_per_h:+.1f} MB/h ({steepest.daemon} pid {steepest.pid})"
    between = [s for s in slopes if s.rss_mb_per_h_between_faults is not None]
    if between:  # a reading beside the target, not the verdict
        most = max(between, key=lambda s: s.rss_mb_per_h_between_faults or 0.0)
        measured += (
            f"; between faults at most {most.rss_mb_per_h_between_faults:+.1f} MB/h"
            f" ({most.daemon} pid {most.pid})"
        )
    return _Target(target, measured, steepest.rss_mb_per_h < RSS_SLOPE_MAX_MB_PER_H)


def _flat_target(
    name: str, per_h: Callable[[Slope], float | None], slopes: Sequence[Slope]
) -> _Target:
    target = f"{name} flat (|slope| < {FLAT_MAX_PER_H:g}/h)"
    rates = [(rate, s) for s in slopes if (rate := per_h(s)) is not None]
    if not rates:
        return _Target(target, "not sampled", None)
    rate, steepest = max(rates, key=lambda pair: abs(pair[0]))
    if abs(rate) < FLAT_MAX_PER_H:
        return _Target(target, f"flat (steepest {rate:+.2f}/h)", True)
    return _Target(target, f"{rate:+.1f}/h ({steepest.daemon} pid {steepest.pid})", False)


def _markdown(result: SoakResult) -> list[str]:
    started = datetime.fromtimestamp(result.started_ms / 1000, UTC)
    share = (
        result.rate_events_per_s / result.capacity_events_per_s
        if result.capacity_events_per_s
        else 0
    )
    return [
        f"# Soak of {started:%Y-%m-%d %H:%M:%S} UTC",
        "",
        f"Seed {result.seed}, {result.duration_s / 60:,.0f} minutes ({result.duration_s:,.0f} s);"
        f" the connector's capacity measured alone {result.capacity_events_per_s:,.0f} events/s,"
        f" rate offered {result.rate_events_per_s:,.0f} events/s ({100 * share:.0f} % of it).",
        "",
        *(
            [f"The whole stack's capacity on this machine: {result.stack_capacity.line()}.", ""]
            if result.stack_capacity
            else []
        ),
        "```",
        result.summary_line(),
        "```",
        "",
        "## Targets",
        "",
        *_table(
            ("target", "measured", "verdict"),
            ((t.target, t.measured, t.verdict) for t in _targets(result)),
        ),
        "",
        "![report](report.png)",
        *_faults(result),
        *_account(result),
        *_minutes(result),
        *_resources(result),
    ]


def _faults(result: SoakResult) -> list[str]:
    by_fault, budget = late_minutes_by_fault(result), late_minute_budget(result)
    rows = (
        (
            f.kind,
            f.target,
            _clock(f.start_s),
            _clock(f.end_s),
            f"{f.end_s - f.start_s:,.1f}",
            f"{by_fault[i]} of at most {budget[i]}",
            f.detail,
        )
        for i, f in enumerate(result.faults)
    )
    header = ("kind", "target", "start (mm:ss)", "end (mm:ss)", "duration (s)", "late minutes")
    return ["", "## Faults", "", *_table((*header, "detail"), rows)]


def _account(result: SoakResult) -> list[str]:
    account = result.account
    lost = f"{account.lost:,}"
    if account.lost_sample:
        lost += f" (for example {', '.join(f'`{i}`' for i in account.lost_sample)})"
    shown = account.audit_mismatches[:MISMATCHES_SHOWN]
    more = len(account.audit_mismatches) - len(shown)
    return [
        "",
        "## Account",
        "",
        f"- accepted: {account.accepted:,}",
        f"- delivered (distinct ids): {account.delivered:,}",
        f"- lost: {lost}",
        f"- duplicates: {account.duplicates:,} ({account.dup_pct:.3f} % of delivered)",
        f"- written to Kafka again: {account.written_again:,} records beyond an id's first"
        " (resent after no answer; the auditors count each record)",
        f"- dead-lettered: {sum(account.dead_lettered.values()):,}",
        "",
        "Duplicates by the fault around the repeat:",
        "",
        *_table(("cause", "duplicates"), sorted(account.duplicate_causes.items())),
        "",
        "Dead-lettered by reason:",
        "",
        *_table(("reason", "events"), sorted(account.dead_lettered.items())),
        "",
        f"Audit mismatches ({len(account.audit_mismatches):,}):",
        "",
        *(f"- `{mismatch}`" for mismatch in shown),
        *([f"- and {more:,} more (result.json holds them all)"] if more else []),
    ]


def _minutes(result: SoakResult) -> list[str]:
    header = ("start (mm:ss)", "delivered (events/s)", "p50 (ms)", "p95 (ms)", "p99 (ms)")
    rows = (
        (
            _clock(_span_s(result, m.start_ms)[0]),
            f"{m.events / 60:,.1f}",
            _ms(m.p50_ms),
            _ms(m.p95_ms),
            _ms(m.p99_ms),
            ("yes" if m.on_time else "no") if m.events else "-",
            ", ".join(m.faults),
        )
        for m in result.minutes
    )
    return ["", "## Minutes", "", *_table((*header, "on time", "faults active"), rows)]


def _resources(result: SoakResult) -> list[str]:
    slopes = (
        (
            s.daemon,
            s.pid,
            f"{s.life_s / 60:,.0f}",
            _rate(s.rss_mb_per_h),
            _rate(s.rss_mb_per_h_between_faults),
            *(_rate(per_h(s)) for _, per_h, _ in _FLAT),
        )
        for s in result.slopes
    )
    by_daemon: dict[str, list[Sample]] = defaultdict(list)
    for sample in sorted(result.samples, key=lambda s: s.at_s):
        by_daemon[sample.daemon].append(sample)
    ends = (
        (
            daemon,
            len({s.pid for s in samples}) - 1,
            _first_last(samples, lambda s: s.rss_mb),
            *(_first_last(samples, of) for _, _, of in _FLAT),
        )
        for daemon, samples in sorted(by_daemon.items())
    )
    counts = tuple(name for name, _, _ in _FLAT)
    rates = tuple(f"{name} (/h)" for name in counts)
    return [
        "",
        "## Resources",
        "",
        "Slopes of each process life long enough to count, fitted after its warm-up; RSS also"
        " between faults (each stretch between them with a level of its own, a fault and the"
        f" {RECOVERY_S / 60:.0f} minutes after it set aside: a step a backlog left moves a"
        " level, a leak climbs in every stretch):",
        "",
        *_table(
            ("daemon", "pid", "life (min)", "RSS (MB/h)", "RSS between faults (MB/h)", *rates),
            slopes,
        ),
        "",
        "First and last sampled, per daemon:",
        "",
        *_table(("daemon", "restarts", "RSS (MB)", *counts), ends),
        "",
        "Exits nobody asked for:",
        "",
        *_table(("daemon", "exits"), sorted(result.exits.items())),
    ]


def _first_last(samples: Sequence[Sample], of: Callable[[Sample], float | int | None]) -> str:
    first, last = of(samples[0]), of(samples[-1])
    return " → ".join(
        "-" if v is None else f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"
        for v in (first, last)
    )


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    body = ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    if not body:
        return ["None."]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *body]


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _clock(seconds: float) -> str:
    whole = round(abs(seconds))
    return f"{'-' if seconds < 0 else ''}{whole // 60:02d}:{whole % 60:02d}"


def _rate(per_h: float | None) -> str:
    return "-" if per_h is None else f"{per_h:+.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"
