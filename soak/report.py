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

from soak.model import Sample, Slope, SoakResult
from soak.picture import draw_picture
from soak.resources import COUNTS, RECOVERY_S
from soak.targets import (
    FLAT,
    late_minute_budget,
    late_minutes_by_fault,
    minute_span_s,
    targets,
)

#: audit mismatches listed in the report (result.json holds them all)
MISMATCHES_SHOWN = 20


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
            ((t.target, t.measured, t.verdict) for t in targets(result)),
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
            _clock(minute_span_s(result, m.start_ms)[0]),
            f"{m.events / 60:,.1f}",
            _ms(m.p50_ms),
            _ms(m.p95_ms),
            _ms(m.p99_ms),
            ("yes" if m.on_time else "no") if m.events else "-",
            "; ".join(
                f"{dest} {_ms(parts.before_connector_ms)} / {_ms(parts.connector_ms)}"
                for dest, parts in sorted(m.parts.items())
            ),
            _ms(m.broker_p95_ms),
            ", ".join(m.faults),
        )
        for m in result.minutes
    )
    parts = "p95 before the connector / the connector's own (ms)"
    columns = (*header, "on time", parts, "the broker alone: p95 (ms)", "faults active")
    return ["", "## Minutes", "", *_table(columns, rows)]


def _resources(result: SoakResult) -> list[str]:
    slopes = (
        (
            s.daemon,
            s.pid,
            f"{s.life_s / 60:,.0f}",
            _rate(s.rss_mb_per_h),
            _rate(s.rss_mb_per_h_between_faults),
            *(_count(s, key, per_h) for _, key, per_h in FLAT),
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
            *(_first_last(samples, COUNTS[key]) for _, key, _ in FLAT),
        )
        for daemon, samples in sorted(by_daemon.items())
    )
    counts = tuple(name for name, _, _ in FLAT)
    rates = tuple(f"{name} (/h; least)" for name in counts)
    return [
        "",
        "## Resources",
        "",
        "Slopes of each process life long enough to count, fitted after its warm-up; RSS also"
        " between faults (each stretch between them with a level of its own, a fault and the"
        f" {RECOVERY_S / 60:.0f} minutes after it set aside: a step a backlog left moves a"
        " level, a leak climbs in every stretch); each count also with the least it was just"
        " after warm-up and at the end (what is in flight comes and goes, a leak lifts it):",
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


def _count(slope: Slope, key: str, per_h: Callable[[Slope], float | None]) -> str:
    """A count's slope and its floors: "+4.20; 18 → 17"."""
    floor = slope.floors.get(key)
    return _rate(per_h(slope)) + ("" if floor is None else f"; {floor.first:,} → {floor.last:,}")


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
