"""Unit tests of the bench's pure helpers: percentiles, rates, the scale rating and its search."""

from __future__ import annotations

import math
import os
import time

import pytest

from bench import measure
from bench.load import Offered
from bench.lookups import LookupPhase
from bench.measure import (
    LagSummary,
    Probe,
    delivery_rate,
    next_probe_rate,
    parse_vm_hwm_kb,
    percentile,
    scale_rating,
    summarize_lag,
)
from bench.phases import LiveResult, Throughput

LIMIT_MS = 1000.0


def test_percentile_is_nearest_rank() -> None:
    """Nearest rank: p50 of 1..10 is 5, p95 is 10, p0 is the smallest, p100 the largest."""
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 50) == 5.0
    assert percentile(values, 95) == 10.0
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0


def test_percentile_of_nothing_is_nan_and_out_of_range_is_refused() -> None:
    """An empty run has no percentile; a percentile outside 0..100 is a caller error."""
    assert math.isnan(percentile([], 95))
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def test_summarize_lag_sorts_its_input() -> None:
    """The summary sorts the lags itself, so receipt order does not matter."""
    summary = summarize_lag([30, 10, 20, 40])
    assert (summary.count, summary.p50_ms, summary.p99_ms, summary.max_ms) == (4, 20, 40, 40)


def test_delivery_rate_starts_the_clock_at_the_first_receipt() -> None:
    """Events of the first receipt only start the clock: 3 events in 0.5 s after it is 6/s."""
    assert delivery_rate([1000, 1000, 1200, 1400, 1500]) == pytest.approx(6.0)
    assert delivery_rate([1000, 1000]) == 0.0
    assert delivery_rate([]) == 0.0


def test_scale_rating_is_the_best_rate_below_every_failure() -> None:
    """A pass above a failure (noise) does not count; incomplete probes fail."""
    probes = [
        Probe(rate=100, p95_ms=50, complete=True),
        Probe(rate=200, p95_ms=1500, complete=True),
        Probe(rate=150, p95_ms=400, complete=True),
        Probe(rate=300, p95_ms=100, complete=True),  # above a failure: ignored
        Probe(rate=180, p95_ms=100, complete=False),  # lost events: a failure
    ]
    assert scale_rating(probes, LIMIT_MS) == 150
    assert scale_rating([], LIMIT_MS) == 0.0
    assert scale_rating([Probe(rate=10, p95_ms=1000, complete=True)], LIMIT_MS) == 0.0


def test_search_starts_at_first_then_climbs_then_bisects() -> None:
    """First probe at `first`; all held: try `high`; after a failure bisect the bracket."""
    kwargs = {"first": 100.0, "high": 125.0, "resolution": 0.1}
    assert next_probe_rate([], LIMIT_MS, **kwargs) == 100.0
    held = Probe(rate=100, p95_ms=10, complete=True)
    assert next_probe_rate([held], LIMIT_MS, **kwargs) == 125.0
    top = Probe(rate=125, p95_ms=10, complete=True)
    assert next_probe_rate([held, top], LIMIT_MS, **kwargs) is None
    failed = Probe(rate=100, p95_ms=5000, complete=True)
    assert next_probe_rate([failed], LIMIT_MS, **kwargs) == 50.0
    narrow = [Probe(rate=95, p95_ms=10, complete=True), failed]
    assert next_probe_rate(narrow, LIMIT_MS, **kwargs) is None


def test_parse_vm_hwm_reads_kilobytes() -> None:
    """VmHWM is read from /proc/PID/status text; a text without it gives None."""
    status = "Name:\tpython\nVmPeak:\t  300 kB\nVmHWM:\t  123456 kB\nVmRSS:\t 100 kB\n"
    assert parse_vm_hwm_kb(status) == 123456
    assert parse_vm_hwm_kb("Name:\tpython\n") is None


def test_cpu_between_interpolates_the_samples() -> None:
    """CPU seconds between two wall-clock times, read off (time ms, CPU s) samples."""
    samples = [(0.0, 1.0), (1000.0, 1.5), (2000.0, 2.5)]
    assert measure.cpu_between(samples, 500.0, 1500.0) == pytest.approx(0.75)
    assert measure.cpu_between(samples, 0.0, 2000.0) == pytest.approx(1.5)
    assert measure.cpu_between(samples, 1500.0, 9000.0) == pytest.approx(0.5)  # held at the end
    assert measure.cpu_between(samples[:1], 0.0, 1000.0) == 0.0


def test_read_cpu_s_counts_this_process() -> None:
    """A busy loop moves this process's CPU seconds; a gone pid is None."""
    before = measure.read_cpu_s(os.getpid())
    assert before is not None
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    after = measure.read_cpu_s(os.getpid())
    assert after is not None
    assert after >= before + 0.03
    assert measure.read_cpu_s(2**22 + 7) is None


def _tenant_phase(big: Throughput, small: Throughput | None) -> LookupPhase:
    lag = LagSummary(count=1, p50_ms=1.0, p95_ms=1.0, p99_ms=1.0, max_ms=1.0)
    probe = LiveResult("probe", Offered(prefix="probe", events=1, duration_s=1.0), 1, lag)
    return LookupPhase(1.0, (0.0, 0.0), big, (0.0, 0.0), 1.0, probe, probe, True, small)


def test_cpu_per_request_is_the_fit_over_the_two_tenant_drains() -> None:
    """CPU = a * events + b * requests through both drains gives back b, whatever a is, and the
    plain drain's share charges a request with what the fit leaves to the events."""
    per_event_s, per_request_s = 10e-6, 250e-6

    def drain(events: int, requests: int, fixed_s: float = 0.0) -> Throughput:
        cpu_s = events * per_event_s + requests * per_request_s + fixed_s
        return Throughput(events, events, 1.0, 1, requests=requests, cpu_s=cpu_s)

    phase = _tenant_phase(drain(400_000, 2_500), drain(100_000, 5_000))
    assert phase.cpu_per_request_us() == pytest.approx(250.0)
    assert _tenant_phase(drain(400_000, 2_500), None).cpu_per_request_us() is None
    plain = Throughput(400_000, 400_000, 1.0, 1, requests=800, cpu_s=400_000 * per_event_s)
    # a second of CPU that is neither the events' nor the requests': the old definition charges
    # it to the requests, the fit over two drains of the same events (both paying it) does not
    fixed = _tenant_phase(drain(400_000, 2_500, 1.0), drain(400_000, 20_000, 1.0))
    assert fixed.cpu_per_request_us() == pytest.approx(250.0)
    assert fixed.cpu_per_request_us_over_plain(plain) == pytest.approx(250.0 + 1e6 / 2_500)
