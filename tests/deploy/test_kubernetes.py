"""deploy/kubernetes/, validated offline: its kinds against the Kubernetes 1.31 and KEDA 2.19
schemas, and what the manifests must agree on with hifi's code (ports, drain deadlines, env).

The checks live in kubernetes_checks.py; the mutation tests show each one fails when the
feature it guards is deleted.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deploy.kubernetes_checks import (
    BASE,
    Doc,
    containers,
    env_problems,
    grace_problems,
    hardening_problems,
    load_base,
    network_problems,
    of_kind,
    ops_port_problems,
    scaling_problems,
)

KUBERNETES_VERSION = "1.31.0"
KEDA_SCHEMA = Path(__file__).parent / "schemas" / "keda-scaledobject-2.19.0.json"


def test_the_kustomization_lists_every_file() -> None:
    """Every YAML file of the directory is a listed resource, so none escapes validation."""
    listed = set(yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in BASE.iterdir()} - {"kustomization.yaml"}
    assert listed == present


def test_the_base_is_namespace_agnostic() -> None:
    """No resource names a namespace: `kubectl apply -k ... -n NS` puts all of them in NS."""
    assert [d["metadata"]["name"] for d in load_base() if "namespace" in d["metadata"]] == []


def test_core_kinds_validate_against_kubernetes_schemas() -> None:
    """Every resource but the ScaledObjects is valid Kubernetes 1.31, unknown fields refused."""
    core = [d for d in load_base() if d["kind"] != "ScaledObject"]
    assert {d["kind"] for d in core} >= {"Deployment", "StatefulSet", "Service", "NetworkPolicy"}
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused where the API server would prune them silently."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [strict(v) for v in schema]
    return schema


def keda_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(strict(json.loads(KEDA_SCHEMA.read_text())))


def test_scaled_objects_validate_against_the_keda_schema() -> None:
    """Every ScaledObject is valid against KEDA 2.19's CRD schema, misspelt fields refused."""
    scaled = list(of_kind(load_base(), "ScaledObject"))
    assert scaled
    validator = keda_validator()
    for doc in scaled:
        validator.validate(doc)
    misspelt = copy.deepcopy(scaled[0])
    misspelt["spec"]["fallbak"] = misspelt["spec"].pop("fallback")
    assert not validator.is_valid(misspelt)


def test_the_ops_ports_agree() -> None:
    """Probes, ports and Services follow the port each daemon's CLI listens on."""
    assert ops_port_problems(load_base()) == []


def test_grace_periods_cover_the_drain(tmp_path: Path) -> None:
    """terminationGracePeriodSeconds exceeds shutdown_timeout_s (connector, retrier) and the
    auditor's fixed drain, read from the catalog the pods mount and from the code."""
    assert grace_problems(load_base(), tmp_path) == []


def test_connectors_scale_and_hold() -> None:
    """KEDA scales each connector on its lag within its partitions and holds on metric loss."""
    assert scaling_problems(load_base()) == []


def test_pods_are_hardened() -> None:
    """Non-root, no capabilities, seccomp, read-only root with /tmp on an emptyDir, resources."""
    assert hardening_problems(load_base()) == []


def test_network_policies_cover_every_pod() -> None:
    """Only named peers reach the ops port of every hifi pod."""
    assert network_problems(load_base()) == []


def test_environments_are_what_hifi_reads(tmp_path: Path) -> None:
    """Each pod's environment names only what hifi reads and loads as the daemon would."""
    assert env_problems(load_base(), tmp_path) == []


def _spec(docs: list[Doc], kind: str) -> Doc:
    spec: Doc = next(of_kind(docs, kind))["spec"]
    return spec


def _container(docs: list[Doc], daemon: str) -> Doc:
    return next(c for _, c in containers(docs) if c["args"][0] == daemon)


MUTATIONS: dict[str, tuple[Callable[[list[Doc]], object], str]] = {
    "no fallback": (lambda d: _spec(d, "ScaledObject").pop("fallback"), "fallback"),
    "Value metric": (
        lambda d: _spec(d, "ScaledObject")["triggers"][0].update(metricType="Value"),
        "AverageValue",
    ),
    "nulls as 0": (
        lambda d: _spec(d, "ScaledObject")["triggers"][0]["metadata"].pop("ignoreNullValues"),
        "ignoreNullValues",
    ),
    "above partitions": (
        lambda d: _spec(d, "ScaledObject").update(maxReplicaCount=24),
        "partitions",
    ),
    "no window": (
        lambda d: _spec(d, "ScaledObject").pop("advanced"),
        "scale-down window",
    ),
    "wrong port": (
        lambda d: _container(d, "retrier")["ports"][0].update(containerPort=9400),
        "9401",
    ),
    "loopback": (
        lambda d: [
            e.update(value="127.0.0.1")
            for e in _container(d, "auditor")["env"]
            if e["name"] == "HIFI_METRICS_HOST"
        ],
        "loopback",
    ),
    "no readiness": (lambda d: _container(d, "connector").pop("readinessProbe"), "readinessProbe"),
    "short grace": (
        lambda d: next(of_kind(d, "StatefulSet"))["spec"]["template"]["spec"].update(
            terminationGracePeriodSeconds=65
        ),
        "60 s drain",
    ),
    "missing secret": (
        lambda d: next(of_kind(d, "Secret"))["stringData"].pop("HIFI_DASHBOARD_TOKEN"),
        "does not exist",
    ),
    "unknown env": (
        lambda d: _container(d, "connector")["env"].append(
            {"name": "HIFI_METRICS_PROT", "value": "1"}
        ),
        "HIFI_METRICS_PROT",
    ),
    "writable root": (
        lambda d: _container(d, "retrier")["securityContext"].pop("readOnlyRootFilesystem"),
        "root filesystem",
    ),
    "no /tmp": (
        lambda d: _container(d, "auditor")["volumeMounts"].pop(),
        "no emptyDir at /tmp",
    ),
    "unselected pod": (
        lambda d: next(of_kind(d, "NetworkPolicy"))["spec"]["podSelector"]["matchLabels"].update(
            {"app.kubernetes.io/part-of": "other"}
        ),
        "no NetworkPolicy",
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_check_fails_without_its_feature(mutation: str, tmp_path: Path) -> None:
    """Deleting or breaking a feature the manifests need makes its check report it."""
    mutate, expected = MUTATIONS[mutation]
    docs = copy.deepcopy(load_base())
    mutate(docs)
    problems = [
        *ops_port_problems(docs),
        *grace_problems(docs, tmp_path),
        *scaling_problems(docs),
        *network_problems(docs),
        *hardening_problems(docs),
        *env_problems(docs, tmp_path),
    ]
    assert any(expected in p for p in problems), problems
