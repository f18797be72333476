"""Every chaos scenario, in the order `make chaos` runs them, and the one call that runs any of them."""

from __future__ import annotations

from chaos import scenarios
from chaos.auditor_group import SCENARIO as AUDITOR_GROUP
from chaos.auditor_group import GroupScenario, run_group_scenario
from chaos.harness import Stage
from chaos.ingest_scenarios import INGEST_SCENARIOS, IngestScenario, run_ingest_scenario
from chaos.scenarios import Result, Scenario, Size

AnyScenario = Scenario | IngestScenario | GroupScenario
SCENARIOS: tuple[AnyScenario, ...] = (*scenarios.SCENARIOS, *INGEST_SCENARIOS, AUDITOR_GROUP)


async def run(stage: Stage, scenario: AnyScenario, size: Size, seed: int = 1) -> Result:
    """Run one scenario on `stage`: loaded through Kafka, or through the ingest service."""
    if isinstance(scenario, IngestScenario):
        return await run_ingest_scenario(stage, scenario, size, seed)
    if isinstance(scenario, GroupScenario):
        return await run_group_scenario(stage, scenario, size, seed)
    return await scenarios.run_scenario(stage, scenario, size, seed)
