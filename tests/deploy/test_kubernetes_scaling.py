"""What KEDA reads for each connector, evaluated by Prometheus itself: promtool runs the
ScaledObject's query over series in which the destination's circuit breaker closes, opens,
probes (half-open) and closes again, and expects the lag while it is closed and no series
otherwise (more members cannot help a destination that refuses; no series holds the count,
docs/deploy-kubernetes.md, "Autoscaling with KEDA"). The fallback's arithmetic is checked in
kubernetes_checks.scaling_problems, without a process.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.kubernetes_checks import Doc, flag, load_base, of_kind

LAG = "hifi_connector_consumer_lag_records"
BREAKER = "hifi_connector_breaker_state"
#: The breaker of the first member, minute by minute: closed, open, half-open, closed.
BREAKER_STATES = [0, 0, 2, 2, 1, 0]
LAG_RECORDS = (30000, 12000)  # two members' partitions


def connector_triggers() -> list[tuple[str, str]]:
    """(destination, query) of the Prometheus trigger of each connector's ScaledObject."""
    dests = {
        w["metadata"]["name"]: flag(c["args"], "--dest")
        for w in of_kind(load_base(), "Deployment")
        for c in w["spec"]["template"]["spec"]["containers"]
        if c["args"][0] == "connector"
    }
    found = []
    for scaled in of_kind(load_base(), "ScaledObject"):
        dest = dests.get(scaled["spec"]["scaleTargetRef"]["name"])
        for trigger in scaled["spec"]["triggers"]:
            if dest is not None and trigger["type"] == "prometheus":
                found.append((dest, str(trigger["metadata"]["query"])))
    return found


def rule_test(dest: str, query: str) -> Doc:
    """A promtool unit test of `query`: the lag of two members while the first member's breaker
    goes through BREAKER_STATES and another destination's stays open; then without a breaker
    series (a destination with [lookups], or a connector before its first request)."""
    lag = [
        {
            "series": f'{LAG}{{dest="{dest}",topic="events",partition="{i}",pod="m{i}"}}',
            "values": f"{records}x{len(BREAKER_STATES)}",
        }
        for i, records in enumerate(LAG_RECORDS)
    ]
    breakers = [
        {
            "series": f'{BREAKER}{{dest="{dest}",pod="m0"}}',
            "values": " ".join(map(str, BREAKER_STATES)),
        },
        {"series": f'{BREAKER}{{dest="{dest}",pod="m1"}}', "values": f"0x{len(BREAKER_STATES)}"},
        {
            "series": f'{BREAKER}{{dest="other-{dest}",pod="o0"}}',
            "values": f"2x{len(BREAKER_STATES)}",
        },
    ]
    total = [{"labels": "{}", "value": sum(LAG_RECORDS)}]
    cases = [
        {"expr": query, "eval_time": f"{minute}m", "exp_samples": total if state == 0 else []}
        for minute, state in enumerate(BREAKER_STATES)
    ]
    return {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": lag + breakers, "promql_expr_test": cases},
            {"interval": "1m", "input_series": lag, "promql_expr_test": [cases[0]]},
        ],
    }


def promtool_test(tmp_path: Path, test: Doc) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("no promtool: `make test` installs Debian's prometheus package (make promtool)")
    path = tmp_path / "trigger_test.yml"
    path.write_text(yaml.safe_dump(test))
    return subprocess.run(
        [found, "test", "rules", path.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.integration
def test_the_lag_trigger_leaves_out_an_open_breaker(tmp_path: Path) -> None:
    """Prometheus returns each connector's lag while its breaker is closed and no series while
    it is open or half-open; another destination's breaker changes nothing."""
    triggers = connector_triggers()
    assert triggers
    for dest, query in triggers:
        done = promtool_test(tmp_path, rule_test(dest, query))
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.integration
def test_the_breaker_case_fails_without_the_feature(tmp_path: Path) -> None:
    """The same promtool test fails on the lag alone, which ignores the breaker."""
    dest, _ = connector_triggers()[0]
    done = promtool_test(tmp_path, rule_test(dest, f'sum({LAG}{{dest="{dest}"}})'))
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "time: 2m" in output, output  # the minute the breaker opens
