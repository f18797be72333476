"""The 90-second version of `make soak`: the whole stack under two overlapping faults, its
account by id, the auditors against it, and the report. It runs on the session's broker as on a
Kafka of the caller's ($HIFI_TEST_BOOTSTRAP, or the tests' Tansu): its names carry the run's
suffix and the broker is not its to freeze or sample."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hifi.kafka.settings import KafkaSettings
from soak.__main__ import problems
from soak.report import write_report
from soak.run import SoakPlan, soak
from soak.schedule import BROKER_FROZEN
from soak.stack import PLAIN, TENANTS_DEST

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUICK = SoakPlan(duration_s=90.0, seed=3, rate_per_s=300.0, faults=2, settle_s=10.0)


@pytest.mark.timeout(600)
async def test_a_short_soak_loses_nothing_and_the_auditors_agree(
    tmp_path: Path, kafka_settings: KafkaSettings
) -> None:
    result = await soak(dataclasses.replace(QUICK, kafka=kafka_settings), tmp_path / "work")
    report = write_report(result, tmp_path / "report")
    print(result.summary_line())
    assert len(result.faults) == 2
    first, second = result.faults
    assert second.start_s < first.end_s or second.start_s - first.start_s < 10.0  # overlapping
    account = result.account
    assert account.accepted > 0.8 * QUICK.duration_s * (QUICK.rate_per_s or 0)
    assert account.lost == 0, account.lost_sample
    assert not account.audit_mismatches, account.audit_mismatches
    # lateness is judged by the 10- and 60-minute runs, each on a broker of its own: the
    # session's holds every earlier test's records, and the dev broker's lag grows with them
    assert [problem for problem in problems(result) if "late minutes" not in problem] == []
    assert result.minutes
    assert all(m.p95_ms is not None for m in result.minutes if m.events)
    # each destination's lag in two parts, from its auditor's final minutes
    parted = [m for m in result.minutes if set(m.parts) == {PLAIN, TENANTS_DEST}]
    assert parted, result.minutes
    assert all(p.connector_ms is not None for m in parted for p in m.parts.values())
    # and what the broker alone took, from the probe's bare consumer
    probed = [m for m in result.minutes if m.events and m.broker_p95_ms is not None]
    assert len(probed) >= len([m for m in result.minutes if m.events]) - 1, result.minutes
    daemons = {sample.daemon for sample in result.samples}
    assert {"connector-plain-a", "auditor-plain", "ingest"} <= daemons
    assert "broker" not in daemons
    assert BROKER_FROZEN not in {fault.kind for fault in result.faults}
    catalog = sorted(path.stem for path in (tmp_path / "work" / "stack" / "catalog").iterdir())
    assert [name[: -len("_abcdef")] for name in catalog] == [PLAIN, TENANTS_DEST]
    assert all(s.kafka_connections > 0 for s in result.samples if s.daemon.startswith("conn"))
    assert report.read_text().count(result.summary_line()) == 1
    assert (report.parent / "report.png").stat().st_size > 10_000
