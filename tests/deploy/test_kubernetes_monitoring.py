"""deploy/kubernetes/monitoring/: the PodMonitor is valid against prometheus-operator's CRD
schema and gives every hifi pod the `job` label the alert rules name.

The job a PodMonitor gives a target is computed as prometheus-operator 0.93 generates it
(pkg/prometheus/promcfg.go, generatePodMonitorConfig): pods selected by `selector.matchLabels`
in the PodMonitor's namespace, one target per container port named `port`, `job` set to
"NAMESPACE/NAME", then to the pod's `jobLabel` label where that label has a value, then the
endpoint's relabelings (only a `replace` into `job` is modelled; any other relabeling of `job`
fails the test rather than being guessed).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deploy.kubernetes_checks import BASE, Doc, load_base, of_kind, read_yaml
from tests.deploy.metric_names import RULES
from tests.deploy.test_kubernetes import strict

MONITORING = BASE / "monitoring"
PODMONITOR_SCHEMA = Path(__file__).parent / "schemas" / "prometheus-operator-podmonitor-0.93.0.json"
EXAMPLE_CONFIG = RULES.parent / "prometheus.example.yml"
NAMESPACE = "hifi"


def load_monitoring() -> list[Doc]:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert set(kustomization) == {"apiVersion", "kind", "resources"}
    return [d for name in kustomization["resources"] for d in read_yaml(MONITORING / name)]


def podmonitor_validator() -> jsonschema.Draft7Validator:
    """prometheus-operator 0.93.0's PodMonitor schema, unknown fields refused."""
    return jsonschema.Draft7Validator(strict(json.loads(PODMONITOR_SCHEMA.read_text())))


def expected_jobs() -> dict[int, str]:
    """The job of each ops port, as deploy/prometheus/prometheus.example.yml names them: the
    names hifi.rules.yml's alerts select (HifiTargetDown, HifiDaemonAbsent)."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    return {
        int(target.rsplit(":", 1)[1]): job["job_name"]
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }


def scraped_jobs(monitors: list[Doc], base: list[Doc]) -> dict[str, set[str]]:
    """The jobs each workload's ops targets get, by workload name, over every PodMonitor."""
    jobs: dict[str, set[str]] = {}
    for workload in of_kind(base, "Deployment", "StatefulSet"):
        pod = workload["spec"]["template"]
        labels = pod["metadata"]["labels"]
        found = jobs.setdefault(workload["metadata"]["name"], set())
        for monitor in of_kind(monitors, "PodMonitor"):
            spec = monitor["spec"]
            if not labels.items() >= spec["selector"].get("matchLabels", {}).items():
                continue
            ports = {p.get("name") for c in pod["spec"]["containers"] for p in c.get("ports", [])}
            for endpoint in spec["podMetricsEndpoints"]:
                if endpoint.get("port") in ports:
                    found.add(job_of(monitor, endpoint, labels))
    return jobs


def job_of(monitor: Doc, endpoint: Doc, labels: dict[str, str]) -> str:
    job = f"{NAMESPACE}/{monitor['metadata']['name']}"
    job = labels.get(monitor["spec"].get("jobLabel", ""), "") or job
    for relabel in endpoint.get("relabelings", []):
        if relabel.get("targetLabel") != "job":
            continue
        modelled = relabel.get("action", "replace") == "replace" and "sourceLabels" not in relabel
        assert modelled, f"a relabeling of job this test does not model: {relabel}"
        job = relabel["replacement"]
    return job


def job_problems(monitors: list[Doc], base: list[Doc]) -> list[str]:
    """Each workload's ops port is scraped under exactly the job the rules expect for it."""
    problems = []
    want = expected_jobs()
    got = scraped_jobs(monitors, base)
    for workload in of_kind(base, "Deployment", "StatefulSet"):
        name = workload["metadata"]["name"]
        ops = [
            p["containerPort"]
            for c in workload["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
            if p["name"] == "ops"
        ]
        expected = {want.get(port, f"no job for port {port}") for port in ops}
        if got[name] != expected:
            problems.append(
                f"{name}: scraped as job {sorted(got[name])}, the rules expect {expected}"
            )
    return problems


def test_the_podmonitor_validates_against_its_crd_schema() -> None:
    """Every PodMonitor is valid against prometheus-operator 0.93.0's CRD, misspelt fields refused."""
    monitors = list(of_kind(load_monitoring(), "PodMonitor"))
    assert monitors
    validator = podmonitor_validator()
    for monitor in monitors:
        validator.validate(monitor)
    misspelt = copy.deepcopy(monitors[0])
    misspelt["spec"]["jobLabels"] = misspelt["spec"].pop("jobLabel")
    assert not validator.is_valid(misspelt)


def test_each_daemon_is_scraped_under_the_job_the_rules_name() -> None:
    """The PodMonitor gives each daemon's pods the job hifi.rules.yml and the example name."""
    assert set(expected_jobs().values()) == {
        "hifi-connector",
        "hifi-retrier",
        "hifi-auditor",
        "hifi-ingest",
    }
    assert job_problems(load_monitoring(), load_base()) == []
    produced = set().union(*scraped_jobs(load_monitoring(), load_base()).values())
    rules = RULES.read_text()
    assert set(re.findall(r'job="([^"]+)"', rules)) <= produced
    for pattern in re.findall(r'job=~"([^"]+)"', rules):
        assert all(re.fullmatch(pattern, job) for job in produced), pattern


def _drop_job_label(docs: list[Doc]) -> Any:
    return next(of_kind(docs, "PodMonitor"))["spec"].pop("jobLabel")


def _other_port(docs: list[Doc]) -> Any:
    return next(of_kind(docs, "PodMonitor"))["spec"]["podMetricsEndpoints"][0].update(port="http")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [(_drop_job_label, "['hifi/hifi']"), (_other_port, "scraped as job []")],
    ids=["no jobLabel", "another port"],
)
def test_the_job_check_fails_without_its_feature(mutate: Any, expected: str) -> None:
    """Without jobLabel the job is "NAMESPACE/hifi", on another port nothing is scraped."""
    monitors = copy.deepcopy(load_monitoring())
    mutate(monitors)
    problems = job_problems(monitors, load_base())
    assert any(expected in p for p in problems), problems
