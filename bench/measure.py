"""Pure measurement helpers: percentiles, rates from delivery receipts, the scale rating, peak RSS."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (`q` in 0..100) of an ascending sequence; NaN when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[rank - 1])


@dataclass(frozen=True)
class LagSummary:
    """End-to-end lag of one run, in milliseconds."""

    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


def summarize_lag(lags_ms: Iterable[float]) -> LagSummary:
    ordered = sorted(lags_ms)
    return LagSummary(
        count=len(ordered),
        p50_ms=percentile(ordered, 50),
        p95_ms=percentile(ordered, 95),
        p99_ms=percentile(ordered, 99),
        max_ms=ordered[-1] if ordered else math.nan,
    )


def delivery_rate(received_ms: Sequence[int]) -> float:
    """Events/s from the first receipt to the last; the events of the first receipt start the clock."""
    if not received_ms:
        return 0.0
    first, last = min(received_ms), max(received_ms)
    if last == first:
        return 0.0
    after_first = sum(1 for ms in received_ms if ms > first)
    return after_first * 1000 / (last - first)


@dataclass(frozen=True)
class Probe:
    """One offered rate and whether it held (p95 under the limit, every event delivered)."""

    rate: float
    p95_ms: float
    complete: bool

    def held(self, limit_ms: float) -> bool:
        return self.complete and self.p95_ms < limit_ms


def scale_rating(probes: Iterable[Probe], limit_ms: float) -> float:
    """The highest rate that held, below every rate that did not (so noise cannot inflate it); 0 if none."""
    probes = list(probes)
    lowest_failed = min((p.rate for p in probes if not p.held(limit_ms)), default=math.inf)
    held = [p.rate for p in probes if p.held(limit_ms) and p.rate < lowest_failed]
    return max(held, default=0.0)


def next_probe_rate(
    probes: Sequence[Probe], limit_ms: float, *, first: float, high: float, resolution: float
) -> float | None:
    """The rate to try next in a search for the scale rating; None once it is narrow enough.

    Starts at `first`; while every probe held it tries `high`; after a failure it bisects between
    the rating so far (0 if none) and the lowest rate that failed, until the bracket is within
    `resolution` (a fraction of its upper end).
    """
    if not probes:
        return first
    failed = [p.rate for p in probes if not p.held(limit_ms)]
    best = scale_rating(probes, limit_ms)
    if not failed:
        return None if best >= high else high
    upper = min(failed)
    if upper - best <= resolution * upper:
        return None
    return (best + upper) / 2


def read_cpu_s(pid: int, proc: Path = Path("/proc")) -> float | None:
    """User + system CPU seconds of a live process so far; None if it is gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_between(samples: Sequence[tuple[float, float]], first_ms: float, last_ms: float) -> float:
    """CPU seconds spent between two wall-clock times (ms), from (time ms, cpu s) samples of a
    process, linearly interpolated; 0.0 with fewer than two samples."""
    if len(samples) < 2 or last_ms <= first_ms:
        return 0.0

    def at(ms: float) -> float:
        previous = samples[0]
        for sample in samples:
            if sample[0] >= ms:
                span = sample[0] - previous[0]
                share = (ms - previous[0]) / span if span > 0 else 1.0
                return previous[1] + max(0.0, min(1.0, share)) * (sample[1] - previous[1])
            previous = sample
        return samples[-1][1]

    return max(0.0, at(last_ms) - at(first_ms))


def read_peak_rss_kb(pid: int, proc: Path = Path("/proc")) -> int | None:
    """VmHWM (peak resident set, kB) of a live process; None if it is gone."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    return parse_vm_hwm_kb(text)


def parse_vm_hwm_kb(status_text: str) -> int | None:
    """The VmHWM value of a /proc/PID/status text, in kB."""
    for line in status_text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None
