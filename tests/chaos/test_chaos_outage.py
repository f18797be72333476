"""The short version of `make chaos`'s `outage_past_settle`: the destination answers 503 until a
minute of the run's events became final while it waited (`settle_s` 5); the auditor shows it
waiting, not missing, never alarms, and agrees with the run's count by id once it is over."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.harness import stage
from chaos.scenarios import QUICK, SCENARIOS, run_scenario

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_an_outage_past_settle_is_late_not_lost(tmp_path: Path) -> None:
    (scenario,) = [s for s in SCENARIOS if s.name == "outage_past_settle"]
    async with stage(tmp_path) as scene:
        result = await run_scenario(scene, scenario, QUICK)
    print(result.line())
    assert result.account.lost == 0, result.line()
    assert result.problems == (), result.line()  # a minute final while down, no loss alarm
    assert "final_while_down=" in result.notes, result.line()
    assert result.audit is not None, result.line()
    assert result.audit.mismatches == (), result.line()
    assert result.audit.entered == result.account.produced, result.line()
