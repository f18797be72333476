"""The 90-second version of `make soak`: the whole stack under two overlapping faults, its
account by id, the auditors against it, and the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from soak.__main__ import problems
from soak.report import write_report
from soak.run import SoakPlan, soak

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUICK = SoakPlan(duration_s=90.0, seed=3, rate_per_s=300.0, faults=2, settle_s=10.0)


@pytest.mark.timeout(600)
async def test_a_short_soak_loses_nothing_and_the_auditors_agree(tmp_path: Path) -> None:
    result = await soak(QUICK, tmp_path / "work")
    report = write_report(result, tmp_path / "report")
    print(result.summary_line())
    assert len(result.faults) == 2
    first, second = result.faults
    assert second.start_s < first.end_s or second.start_s - first.start_s < 10.0  # overlapping
    account = result.account
    assert account.accepted > 0.8 * QUICK.duration_s * (QUICK.rate_per_s or 0)
    assert account.lost == 0, account.lost_sample
    assert not account.audit_mismatches, account.audit_mismatches
    assert problems(result) == []
    assert result.minutes
    assert all(m.p95_ms is not None for m in result.minutes if m.events)
    daemons = {sample.daemon for sample in result.samples}
    assert {"connector-plain-a", "auditor-plain", "ingest", "broker"} <= daemons
    assert all(s.kafka_connections > 0 for s in result.samples if s.daemon.startswith("conn"))
    assert report.read_text().count(result.summary_line()) == 1
    assert (report.parent / "report.png").stat().st_size > 10_000
