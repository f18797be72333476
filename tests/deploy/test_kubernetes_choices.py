"""The choices deploy/kubernetes/ makes explicit, each held: the image is hifi's version, the
auditors' ReadWriteMany claim names its storage class, every workload has a disruption budget
that lets a node drain one pod at a time, and egress reaches only DNS, Kafka, Redis (ingest),
the destinations (connectors) and the auditor's ops port (retrier), the ports read from the
configuration the pods load (hifi-env, the catalog, the Secret's example, the retrier's env).
"""

from __future__ import annotations

import copy
import math
import tomllib
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from hifi.version import VERSION
from tests.deploy.kubernetes_checks import (
    ROOT,
    WORKLOADS,
    Doc,
    containers,
    dests_of,
    load_installed,
    named,
    of_kind,
    pod_env,
)

DOC = ROOT / "docs" / "deploy-kubernetes.md"
DNS = {(53, "UDP"), (53, "TCP")}
EVERYWHERE = "0.0.0.0/0"
DEFAULT_PORTS = {"https": 443, "http": 80, "redis": 6379, "rediss": 6379}
#: The file-system storage the docs name for a ReadWriteMany claim.
RWX_BACKENDS = ("EFS", "Filestore", "Azure Files", "NFS", "CephFS")


def image_problems(docs: list[Doc]) -> list[str]:
    """Every container runs hifi's image at the version of this checkout."""
    return [
        f"{w['metadata']['name']}: image {c['image']}, not hifi:{VERSION}"
        for w, c in containers(docs)
        if c["image"].rsplit("/", 1)[-1] != f"hifi:{VERSION}"
    ]


def storage_problems(docs: list[Doc]) -> list[str]:
    """A ReadWriteMany claim names a storage class, and the docs say what to back it with."""
    problems = []
    text = DOC.read_text()
    for claim in of_kind(docs, "PersistentVolumeClaim"):
        name, spec = claim["metadata"]["name"], claim["spec"]
        if "ReadWriteMany" not in spec["accessModes"]:
            continue
        chosen = spec.get("storageClassName")
        if not chosen:
            problems.append(f"{name}: ReadWriteMany on the default class, often block storage")
        elif f"`{chosen}`" not in text or not all(b in text for b in RWX_BACKENDS):
            problems.append(f"{name}: {DOC.name} does not explain storage class {chosen}")
    return problems


def least_replicas(docs: list[Doc], workload: Doc) -> int:
    """The fewest replicas a workload runs: its ScaledObject's minimum, else its count."""
    for scaled in of_kind(docs, "ScaledObject"):
        if scaled["spec"]["scaleTargetRef"]["name"] == workload["metadata"]["name"]:
            return int(scaled["spec"].get("minReplicaCount", 0))
    return int(workload["spec"].get("replicas", 1))


def disruptions_allowed(budget: Doc, replicas: int) -> int:
    """How many ready pods of `replicas` the budget lets an eviction take (maxUnavailable
    percentages round up, minAvailable ones too, as the disruption controller does)."""
    spec = budget["spec"]

    def count(value: int | str) -> int:
        return math.ceil(replicas * int(value[:-1]) / 100) if isinstance(value, str) else value

    if "maxUnavailable" in spec:
        return count(spec["maxUnavailable"])
    return replicas - count(spec.get("minAvailable", 0))


def budget_problems(docs: list[Doc]) -> list[str]:
    """Each workload has one PodDisruptionBudget, which lets a node drain evict exactly one pod
    at a time even at its fewest replicas (minAvailable 1 of 1 would block every drain)."""
    problems = []
    for workload in of_kind(docs, *WORKLOADS):
        name, labels = workload["metadata"]["name"], workload["spec"]["template"]["metadata"]
        budgets = [
            b
            for b in of_kind(docs, "PodDisruptionBudget")
            if labels["labels"].items() >= b["spec"]["selector"]["matchLabels"].items()
        ]
        if len(budgets) != 1:
            problems.append(f"{name}: {len(budgets)} PodDisruptionBudgets select its pods, not 1")
            continue
        replicas = least_replicas(docs, workload)
        allowed = disruptions_allowed(budgets[0], replicas)
        if allowed != 1:
            problems.append(f"{name}: at {replicas} replicas its budget allows {allowed} evictions")
    return problems


def port_of(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or DEFAULT_PORTS[parts.scheme]


def needed_egress(docs: list[Doc], workload: Doc, container: Doc) -> set[tuple[int, str]]:
    """The (port, protocol) a pod connects to, read from the configuration it loads."""
    env = pod_env(docs, container)
    needed = set(DNS)
    needed |= {(int(a.rsplit(":", 1)[1]), "TCP") for a in env["HIFI_KAFKA_BOOTSTRAP"].split(",")}
    daemon = container["args"][0]
    if daemon == "connector":
        catalog = named(docs, "ConfigMap", "hifi-destinations")["data"]
        for dest in dests_of(container["args"]):
            settings = tomllib.loads(catalog[f"{dest}.toml"])
            urls = [settings["url"], settings.get("auth", {}).get("token_url")]
            needed |= {(port_of(u), "TCP") for u in urls if u}
    if daemon == "ingest" and "HIFI_REDIS_URL" in env:
        needed.add((port_of(env["HIFI_REDIS_URL"]), "TCP"))
    if daemon == "retrier" and "HIFI_AUDITOR_URL" in env:
        needed.add((port_of(env["HIFI_AUDITOR_URL"]), "TCP"))
    return needed


def egress_problems(docs: list[Doc]) -> list[str]:
    """Egress policies select every pod and admit exactly the ports it needs, each to a named
    peer; only the destinations' ports are open to every address."""
    problems = []
    for workload, container in containers(docs):
        name, labels = workload["metadata"]["name"], workload["spec"]["template"]["metadata"]
        rules = [
            rule
            for p in of_kind(docs, "NetworkPolicy")
            if "Egress" in p["spec"]["policyTypes"]
            and labels["labels"].items() >= p["spec"]["podSelector"]["matchLabels"].items()
            for rule in p["spec"].get("egress", [])
        ]
        if not rules:
            problems.append(f"{name}: no egress policy selects its pods: it reaches anything")
            continue
        allowed = {(p["port"], p.get("protocol", "TCP")) for r in rules for p in r.get("ports", [])}
        needed = needed_egress(docs, workload, container)
        if allowed != needed:
            problems.append(f"{name}: egress admits {sorted(allowed)}, it needs {sorted(needed)}")
        for rule in rules:
            world = any(
                peer.get("ipBlock", {}).get("cidr") == EVERYWHERE for peer in rule.get("to", [{}])
            )
            if ("to" not in rule or world) and container["args"][0] != "connector":
                problems.append(f"{name}: an egress rule to every address: {rule}")
    return problems


def test_the_image_is_this_version() -> None:
    """Every container runs hifi:VERSION (hifi/version.py), not a moving tag."""
    assert image_problems(load_installed()) == []


def test_the_shared_archive_names_its_storage_class() -> None:
    """The auditors' ReadWriteMany claim names a class the docs explain."""
    assert storage_problems(load_installed()) == []


def test_every_workload_drains_one_pod_at_a_time() -> None:
    """A PodDisruptionBudget per workload lets a node drain evict one pod, never blocks it."""
    assert budget_problems(load_installed()) == []


def test_egress_reaches_only_what_the_pods_need() -> None:
    """DNS, the brokers, Redis for ingest, HTTPS for the connectors, the auditor for the
    retrier: every pod's egress is exactly that, ports read from its configuration."""
    assert egress_problems(load_installed()) == []


def _spec_of(docs: list[Doc], kind: str, name: str) -> Doc:
    spec: Doc = named(docs, kind, name)["spec"]
    return spec


def _min_available_retrier(docs: list[Doc]) -> None:
    spec = _spec_of(docs, "PodDisruptionBudget", "hifi-retrier")
    del spec["maxUnavailable"]
    spec["minAvailable"] = 1


CHOICE_MUTATIONS: dict[
    str, tuple[Callable[[list[Doc]], object], Callable[[list[Doc]], list[str]], str]
] = {
    "latest tag": (
        lambda d: next(containers(d))[1].update(image="hifi:latest"),
        image_problems,
        "not hifi:",
    ),
    "default storage class": (
        lambda d: _spec_of(d, "PersistentVolumeClaim", "hifi-auditor-archive").pop(
            "storageClassName"
        ),
        storage_problems,
        "default class",
    ),
    "retrier budget blocks drains": (
        _min_available_retrier,
        budget_problems,
        "hifi-retrier: at 1 replicas its budget allows 0",
    ),
    "auditor without a budget": (
        lambda d: d.remove(named(d, "PodDisruptionBudget", "hifi-auditor")),
        budget_problems,
        "hifi-auditor: 0 PodDisruptionBudgets",
    ),
    "kafka on another port": (
        lambda d: named(d, "ConfigMap", "hifi-env")["data"].update(
            HIFI_KAFKA_BOOTSTRAP="kafka-bootstrap.kafka.svc:9092"
        ),
        egress_problems,
        "(9092, 'TCP')",
    ),
    "egress unrestricted": (
        lambda d: d.remove(named(d, "NetworkPolicy", "hifi-egress")),
        egress_problems,
        "it needs",
    ),
    "redis for everyone": (
        lambda d: _spec_of(d, "NetworkPolicy", "hifi-ingest-egress")["podSelector"].update(
            matchLabels={"app.kubernetes.io/part-of": "hifi"}
        ),
        egress_problems,
        "hifi-retrier: egress admits",
    ),
    "kafka to the world": (
        lambda d: _spec_of(d, "NetworkPolicy", "hifi-egress")["egress"][1].pop("to"),
        egress_problems,
        "every address",
    ),
}


@pytest.mark.parametrize("mutation", sorted(CHOICE_MUTATIONS))
def test_each_choice_check_fails_without_its_feature(mutation: str) -> None:
    """Undoing a choice (a moving tag, the default class, a blocking or missing budget, open
    or mismatched egress) makes its check report it."""
    mutate, check, expected = CHOICE_MUTATIONS[mutation]
    docs = copy.deepcopy(load_installed())
    mutate(docs)
    problems = check(docs)
    assert any(expected in p for p in problems), problems
