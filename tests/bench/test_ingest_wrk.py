"""The wrk script's output line and what a run's figures are made of."""

from __future__ import annotations

import pytest

from bench.ingest_wrk import SCRIPT, WrkRun, parse_done_line


def test_the_done_line_is_found_after_wrk_own_output() -> None:
    """The `hifi-wrk {json}` line is read even with wrk's own report around it."""
    stdout = (
        "Running 2s test @ http://127.0.0.1:1/v1/events/bench\n  1 threads and 4 connections\n"
        'hifi-wrk {"requests":10,"duration_us":2000000,"p95_us":1500}\n'
    )
    assert parse_done_line(stdout) == {"requests": 10, "duration_us": 2000000, "p95_us": 1500}


def test_no_done_line_is_an_error_naming_it() -> None:
    """wrk output without the script's line (a script that failed) is not read as zeros."""
    with pytest.raises(RuntimeError, match="hifi-wrk"):
        parse_done_line("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_rates_count_only_requests_answered_2xx() -> None:
    """Errors are left out of requests/s and events/s."""
    run = WrkRun(
        batch=100,
        connections=4,
        offered_rps=None,
        requests=110,
        duration_us=2_000_000,
        errors=10,
        p50_us=1,
        p95_us=2,
        p99_us=3,
        max_us=4,
    )
    assert run.rps == 50.0
    assert run.events_per_s == 5000.0
    assert run.events == 10_000


def test_the_script_reads_the_token_from_the_environment() -> None:
    """The bearer token never appears on wrk's command line or in the script file."""
    assert 'os.getenv("HIFI_BENCH_TOKEN")' in SCRIPT
