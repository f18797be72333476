"""The Prometheus alert rules (deploy/prometheus): promtool accepts them and their unit tests
pass, every alert has a case that fires and one that must not, a runbook section linked from
the runbooks' base URL, a page waits a `for:`, and reads only series the daemons expose."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.metric_names import (
    ROOT,
    RULES,
    duration_s,
    recorded_names,
    registry_series,
    rules,
    unknown_names,
)

PROMETHEUS_DIR = RULES.parent
RULE_TESTS = sorted(PROMETHEUS_DIR.glob("tests*.yml"))
EXAMPLE_CONFIG = PROMETHEUS_DIR / "prometheus.example.yml"
ALERTS_DOC = ROOT / "docs" / "alerts.md"
# The runbooks' base URL is the external label runbook_base; without it, the path here.
RUNBOOK = "{{ with $externalLabels.runbook_base }}{{ . }}{{ else }}docs/alerts.md{{ end }}#"
SEVERITIES = {"page", "ticket", "none"}  # none: an alert only inhibitions read
# Pages that fire without a `for:`, and why.
PAGES_WITHOUT_FOR = {
    "HifiLossInFinalMinute": "a lost event is never noise, and its counter does not go back",
}


def alerts() -> dict[str, dict[str, Any]]:
    return {str(rule["alert"]): rule for rule in rules() if "alert" in rule}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run Debian's promtool in deploy/prometheus (the rule files name each other from there)."""
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("no promtool: `make test` installs Debian's prometheus package (make promtool)")
    return subprocess.run(
        [found, *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120
    )


@pytest.mark.integration
def test_promtool_checks_the_rules() -> None:
    """`promtool check rules` accepts the rule file."""
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


@pytest.mark.integration
@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda path: path.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    """`promtool test rules` passes every case of the test file."""
    done = promtool("test", "rules", path.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == 1


@pytest.mark.integration
def test_promtool_checks_the_example_scrape_config() -> None:
    """The example Prometheus configuration (its jobs, and the rule file it loads) is valid."""
    done = promtool("check", "config", EXAMPLE_CONFIG.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    """Each alert is expected to fire in some unit test and to stay quiet in another."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        spec = yaml.safe_load(path.read_text())
        assert spec["rule_files"] == [RULES.name], f"{path.name}: rule_files"
        for test in spec["tests"]:
            for case in test.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert set(alerts()) - firing == set(), "alerts without a case where they fire"
    assert set(alerts()) - quiet == set(), "alerts without a case where they must not fire"
    assert (firing | quiet) - set(alerts()) == set(), "cases of alerts the rules do not have"


def test_every_alert_has_a_severity_annotations_and_a_runbook_section() -> None:
    """Severity page, ticket or none; a summary, a description, and a runbook_url built from the
    runbooks' base URL whose anchor is a section of docs/alerts.md named after the alert."""
    sections = set(re.findall(r"^## (\w+)$", ALERTS_DOC.read_text(), re.MULTILINE))
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert annotations.keys() == {"summary", "description", "runbook_url"}, name
        assert annotations["runbook_url"] == RUNBOOK + name.lower(), name
    assert sections == set(alerts()), "docs/alerts.md: one section per alert, no other"


def test_the_example_config_sets_the_runbooks_base_url() -> None:
    """prometheus.example.yml sets the external label the runbook URLs start with."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    assert config["global"]["external_labels"]["runbook_base"].startswith("https://")


def test_a_page_waits_a_for_that_outlasts_a_minute_of_noise() -> None:
    """Every alert that pages has a `for:` of 2 minutes or more, but those listed with a reason."""
    for name, rule in alerts().items():
        if rule["labels"]["severity"] != "page" or name in PAGES_WITHOUT_FOR:
            continue
        assert duration_s(str(rule.get("for", "0s"))) >= 120, name
    assert all(alerts()[name]["labels"]["severity"] == "page" for name in PAGES_WITHOUT_FOR)
    assert all("for" not in alerts()[name] for name in PAGES_WITHOUT_FOR)


def test_the_runbook_counts_the_rules_and_names_only_series_that_exist() -> None:
    """docs/alerts.md says how many alerts and recording rules the file holds, and every
    `hifi_` series it names in backquotes is one the daemons expose or a rule records (the
    page once named a breaker series that never existed)."""
    text = ALERTS_DOC.read_text()
    counted = re.search(r"The rule file holds (\d+) alerts and (\d+) recording rules", text)
    assert counted is not None, "docs/alerts.md: the sentence counting the rules"
    recorded = [rule for rule in rules() if "record" in rule]
    assert (int(counted[1]), int(counted[2])) == (len(alerts()), len(recorded))
    names = set(re.findall(r"`((?:dest:|stream:)?hifi_[a-z_:]+)(?:\{[^`]*\})?`", text))
    known, stems = registry_series(), recorded_names()

    def exists(name: str) -> bool:  # a histogram by its family, rules by their stem (`{5m,1h}`)
        family = {name, *(name + suffix for suffix in ("_bucket", "_count", "_sum", "_total"))}
        windows = any(re.fullmatch(re.escape(name) + r"\d+[smhd]", r) for r in stems)
        return bool(family & (known | stems)) or windows

    assert sorted(name for name in names if not exists(name)) == []


def test_the_runbook_names_only_alerts_that_exist() -> None:
    """Every alert name docs/alerts.md writes (`HifiSomething`, in its text, its incidents'
    table and its links) is an alert of the rule file."""
    named = set(re.findall(r"\bHifi[A-Z][A-Za-z]+\b", ALERTS_DOC.read_text()))
    anchors = set(re.findall(r"\(#(hifi[a-z]+)\)", ALERTS_DOC.read_text()))
    assert sorted(named - set(alerts())) == []
    assert sorted(anchors - {name.lower() for name in alerts()}) == []


def test_rules_read_only_series_the_daemons_expose() -> None:
    """Every name an expression selects is in the daemons' registry, is `up`, or is recorded
    by a rule of the file; recorded names follow level:metric:operations, the level a
    destination's or an ingest stream's."""
    assert unknown_names([str(rule["expr"]) for rule in rules()]) == {}
    assert all(re.fullmatch(r"(dest|stream):hifi_\w+:\w+", name) for name in recorded_names())


def test_an_unknown_series_is_reported() -> None:
    """The name check finds a series that does not exist, inside matchers and ranges too."""
    expr = 'sum by (dest) (rate(hifi_connector_nonexistent_total{dest=~"a"}[5m])) > 0'
    assert unknown_names([expr]) == {expr: {"hifi_connector_nonexistent_total"}}
    assert unknown_names(["hifi_ready == 0", "up == 0"]) == {}
