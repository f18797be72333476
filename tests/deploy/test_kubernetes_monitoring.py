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
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.kubernetes_checks import BASE, ROOT, Doc, load_base, of_kind, read_yaml
from tests.deploy.metric_names import RULES
from tests.deploy.schema_checks import assert_valid_and_strict, podmonitor_validator

MONITORING = BASE / "monitoring"
EXAMPLE_CONFIG = RULES.parent / "prometheus.example.yml"
NAMESPACE = "hifi"


def load_monitoring() -> list[Doc]:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert set(kustomization) == {"apiVersion", "kind", "resources"}
    return [d for name in kustomization["resources"] for d in read_yaml(MONITORING / name)]


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
    assert_valid_and_strict(podmonitor_validator(), monitors, "jobLabel", "jobLabels")


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


def documented_scrape_job() -> Doc:
    """The scrape job docs/deploy-kubernetes.md gives a Prometheus without the operator."""
    text = (ROOT / "docs" / "deploy-kubernetes.md").read_text()
    scraping = text.split("\n## Scraping\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", scraping, re.DOTALL)
    (job,) = yaml.safe_load(textwrap.dedent(block))
    return dict(job)


def relabel(job: Doc, meta: dict[str, str]) -> dict[str, str] | None:
    """Prometheus's relabelling of one target by `job`'s keep and replace rules (the actions
    the documented job uses; any other fails the test)."""
    labels = {"job": job["job_name"], **meta}
    for rule in job["relabel_configs"]:
        value = ";".join(labels.get(name, "") for name in rule["source_labels"])
        matched = re.fullmatch(rule.get("regex", "(.*)"), value)
        action = rule.get("action", "replace")
        assert action in ("keep", "replace"), f"a relabeling this test does not model: {rule}"
        if action == "keep" and not matched:
            return None
        if action == "replace" and matched:
            labels[rule["target_label"]] = matched.expand(rule.get("replacement", r"\1"))
    return labels


def test_the_documented_scrape_job_names_the_rules_jobs() -> None:
    """Without the operator, the page's kubernetes_sd job gives each daemon's ops port the job
    prometheus.example.yml gives it, and scrapes no other port."""
    job, want = documented_scrape_job(), expected_jobs()
    for workload in of_kind(load_base(), "Deployment", "StatefulSet"):
        pod = workload["spec"]["template"]
        meta = {
            f"__meta_kubernetes_pod_label_{re.sub(r'[^A-Za-z0-9_]', '_', k)}": v
            for k, v in pod["metadata"]["labels"].items()
        }
        for port in (p for c in pod["spec"]["containers"] for p in c["ports"]):
            target = relabel(
                job, {**meta, "__meta_kubernetes_pod_container_port_name": port["name"]}
            )
            expected = want[port["containerPort"]] if port["name"] == "ops" else None
            assert (target or {}).get("job") == expected, (workload["metadata"]["name"], port)


@pytest.mark.integration
def test_promtool_accepts_the_documented_scrape_job(tmp_path: Path) -> None:
    """`promtool check config` accepts the page's scrape job and its relabelling. Debian's
    Prometheus is built without Kubernetes discovery, so a static target stands in for it."""
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("no promtool: `make test` installs Debian's prometheus package (make promtool)")
    config = tmp_path / "prometheus.yml"
    job = documented_scrape_job()
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod", "namespaces": {"names": ["hifi"]}}]
    job["static_configs"] = [{"targets": ["127.0.0.1:9400"]}]
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    done = subprocess.run(
        [found, "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
