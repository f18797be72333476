"""The short version of `make chaos`: every scenario with real processes; nothing lost or wrongly dead-lettered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from chaos.auditor_group import GAP_EVENTS, run_group_scenario
from chaos.auditor_group import SCENARIO as AUDITOR_GROUP
from chaos.harness import Stage, stage
from chaos.ingest_scenarios import INGEST_SCENARIOS, IngestScenario, run_ingest_scenario
from chaos.scenarios import QUICK, SCENARIOS, Scenario, run_scenario

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
async def scene(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stage]:
    async with stage(Path(tmp_path_factory.mktemp("chaos"))) as scene:
        yield scene


# the outage past settle_s waits for a minute's end: on a worker (and a stage) of its own
OWN_MODULE = {"outage_past_settle"}
SHARED = [s for s in SCENARIOS if s.name not in OWN_MODULE]


@pytest.mark.parametrize("scenario", SHARED, ids=[s.name for s in SHARED])
async def test_scenario_loses_nothing(scene: Stage, scenario: Scenario) -> None:
    """Under this fault every produced id is delivered or, if poison or malformed, dead-lettered (and audited so)."""
    result = await run_scenario(scene, scenario, QUICK)
    print(result.line())
    assert result.account.lost == 0, result.line()
    assert result.account.wrong_dlq == 0, result.line()
    assert result.account.missing_dlq == 0, result.line()
    assert result.account.produced == QUICK.events + scenario.malformed
    assert result.within_bounds, result.line()  # hand-offs and refused events, where bounded
    if scenario.audited:  # every final minute of the auditor's tables matches the ids
        assert result.audit is not None, result.line()
        assert result.audit.mismatches == (), result.line()
        assert result.audit.entered == result.account.produced, result.line()


@pytest.mark.parametrize("scenario", INGEST_SCENARIOS, ids=[s.name for s in INGEST_SCENARIOS])
async def test_ingest_scenario_loses_nothing_acknowledged(
    scene: Stage, scenario: IngestScenario
) -> None:
    """Under this fault every batch is resent until ingest answers 2xx, and every id so answered is delivered."""
    result = await run_ingest_scenario(scene, scenario, QUICK)
    print(result.line())
    # every batch got its 2xx in the end; under the cut, after 503s
    assert result.problems == (), result.line()
    assert result.account.produced == QUICK.events, result.line()
    assert result.account.lost == 0, result.line()
    assert result.account.wrong_dlq == 0, result.line()
    if scenario.name == "ingest_kill9":
        assert result.kills == QUICK.kills, result.line()


async def test_three_auditors_of_one_group_count_what_the_run_and_one_auditor_count(
    scene: Stage,
) -> None:
    """Three auditors share a destination's partitions through a flaky destination, a killed
    connector, the lead share's member killed and a gap on one partition: every member's final
    minutes equal the run's count by id (the gap's events missing) and the single auditor's."""
    result = await run_group_scenario(scene, AUDITOR_GROUP, QUICK)
    print(result.line())
    assert result.account.lost == 0, result.line()
    assert result.audit is not None, result.line()
    assert result.audit.mismatches == (), result.line()
    assert result.audit.entered == result.account.produced + GAP_EVENTS, result.line()
    assert result.kills == 2, result.line()
