"""docs/deploy-kubernetes.md says what deploy/kubernetes/ holds: its file table lists exactly the
directory's files, and the ports, grace periods, requests and ScaledObject figures it quotes
are the manifests'. The install block itself is run by test_kubernetes_install.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tests.deploy.kubernetes_checks import BASE, ROOT, Doc, containers, load_installed

DOC = ROOT / "docs" / "deploy-kubernetes.md"
DAEMONS = ("connector", "retrier", "auditor", "ingest")


def section(title: str) -> str:
    return DOC.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def by_daemon(docs: list[Doc]) -> dict[str, tuple[Doc, Doc]]:
    return {c["args"][0]: (w, c) for w, c in containers(docs)}


def test_the_file_table_lists_every_file() -> None:
    """The table at the top of the page names each file of deploy/kubernetes/, and only those."""
    table = DOC.read_text().split("| file | what |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `([^`]+)` \|", table, re.MULTILINE))
    present = {str(p.relative_to(BASE)) for p in BASE.rglob("*") if p.is_file()}
    assert listed == present


def test_the_ports_are_the_manifests() -> None:
    """ "9400 connector, 9401 retrier, ..." is each daemon's ops container port."""
    text = " ".join(DOC.read_text().split())
    ports = re.findall(r"(\d{4}) (connector|retrier|auditor|ingest)\b", text)
    quoted = {daemon: int(port) for port, daemon in ports}
    ops = {
        daemon: next(p["containerPort"] for p in c["ports"] if p["name"] == "ops")
        for daemon, (_, c) in by_daemon(load_installed()).items()
    }
    assert quoted == ops


def test_the_grace_periods_are_the_manifests() -> None:
    """The grace periods the page gives are each workload's terminationGracePeriodSeconds."""
    text = " ".join(DOC.read_text().split())
    quoted = {
        "connector": r"(\d+) s for the connector and the retrier",
        "retrier": r"(\d+) s for the connector and the retrier",
        "auditor": r"(\d+) s for the auditor",
        "ingest": r"(\d+) s for ingest",
    }
    for daemon, (workload, _) in by_daemon(load_installed()).items():
        grace = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        found = re.search(quoted[daemon], text)
        assert found is not None, daemon
        assert int(found.group(1)) == grace, daemon


def test_the_requests_are_the_manifests() -> None:
    """ "connector 500m / 256Mi / 512Mi" is each container's CPU and memory request and limit."""
    text = " ".join(DOC.read_text().split())
    for daemon, (_, container) in by_daemon(load_installed()).items():
        resources = container["resources"]
        quoted = " / ".join(
            str(v)
            for v in (
                resources["requests"]["cpu"],
                resources["requests"]["memory"],
                resources["limits"]["memory"],
            )
        )
        assert f"{daemon} {quoted}" in text, daemon


def scalars(doc: Any) -> Iterator[tuple[str, str]]:
    """Every (key, value) of a document whose value is a scalar, at any depth."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if isinstance(value, dict | list):
                yield from scalars(value)
            else:
                yield str(key), str(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from scalars(item)


def test_the_scaling_figures_are_the_manifests() -> None:
    """Each `key: value` the KEDA and ingest sections quote is a field of the manifests
    (fallback, windows, replica bounds, metric types, budgets, rollout settings)."""
    fields = set(scalars(load_installed()))
    quoted = [
        (key, value.strip('"'))
        for title in ("Autoscaling with KEDA", "The ingest service")
        for key, value in re.findall(r"`([A-Za-z]+): ([^`{}]+)`", section(title))
    ]
    assert len(quoted) > 10
    assert [pair for pair in quoted if pair not in fields] == []


def test_the_startup_budgets_are_the_manifests() -> None:
    """ "up to 60 s to start, 5 min for the auditor" is each startup probe's period times its
    failure threshold."""
    text = " ".join(DOC.read_text().split())
    assert "(up to 60 s to start, 5 min for the auditor," in text
    for daemon, (_, container) in by_daemon(load_installed()).items():
        probe = container["startupProbe"]
        budget_s = probe["periodSeconds"] * probe["failureThreshold"]
        assert budget_s == (300 if daemon == "auditor" else 60), daemon
