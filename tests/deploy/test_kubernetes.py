"""deploy/kubernetes/, validated offline: its kinds against the Kubernetes 1.31 and KEDA 2.19
schemas, and what the manifests must agree on with hifi's code (ports, drain deadlines, env).

The checks live in kubernetes_checks.py; the mutation tests show each one fails when the
feature it guards is deleted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deploy.ingest_checks import (
    api_problems,
    ingest_env_problems,
    ingest_grace_problems,
    ingest_scaling_problems,
)
from tests.deploy.kubernetes_checks import (
    BASE,
    EXAMPLE_SECRET,
    Doc,
    containers,
    env_problems,
    grace_problems,
    hardening_problems,
    load_base,
    load_installed,
    network_problems,
    of_kind,
    ops_port_problems,
    scaling_problems,
)
from tests.deploy.schema_checks import assert_valid_and_strict, keda_validator

KUBERNETES_VERSION = "1.31.0"


#: Files of a kustomization's directory that are deliberately not resources.
NOT_RESOURCES = {"kustomization.yaml", EXAMPLE_SECRET.name}


@pytest.mark.parametrize("directory", [BASE, BASE / "monitoring"], ids=["base", "monitoring"])
def test_the_kustomization_lists_every_file(directory: Path) -> None:
    """Every file of the directory is a listed resource, so none escapes validation, but for
    the example Secret, which the base must not apply over the real one."""
    listed = set(yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in directory.iterdir() if p.is_file()} - NOT_RESOURCES
    assert listed == present
    assert EXAMPLE_SECRET.name not in listed


def test_the_base_holds_no_secret() -> None:
    """Applying the base never overwrites the Secret the install created before it."""
    assert [d["metadata"]["name"] for d in load_base() if d["kind"] == "Secret"] == []
    base = load_base()
    assert [d["kind"] for d in load_installed() if d not in base] == ["Secret"]


def test_the_base_is_namespace_agnostic() -> None:
    """No resource names a namespace: `kubectl apply -k ... -n NS` puts all of them in NS."""
    assert [d["metadata"]["name"] for d in load_installed() if "namespace" in d["metadata"]] == []


def test_core_kinds_validate_against_kubernetes_schemas() -> None:
    """Every resource but the ScaledObjects is valid Kubernetes 1.31, unknown fields refused."""
    core = [d for d in load_installed() if d["kind"] != "ScaledObject"]
    assert {d["kind"] for d in core} >= {"Deployment", "StatefulSet", "Service", "NetworkPolicy"}
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_scaled_objects_validate_against_the_keda_schema() -> None:
    """Every ScaledObject is valid against KEDA 2.19's CRD schema, misspelt fields refused."""
    scaled = list(of_kind(load_installed(), "ScaledObject"))
    assert_valid_and_strict(keda_validator(), scaled, "fallback", "fallbak")


def test_the_ops_ports_agree() -> None:
    """Probes, ports and Services follow the port each daemon's CLI listens on."""
    assert ops_port_problems(load_installed()) == []


def test_grace_periods_cover_the_drain(tmp_path: Path) -> None:
    """terminationGracePeriodSeconds exceeds shutdown_timeout_s (connector, retrier) and the
    auditor's fixed drain, read from the catalog the pods mount and from the code."""
    assert grace_problems(load_installed(), tmp_path) == []


def test_connectors_scale_and_hold() -> None:
    """KEDA scales each connector on its lag within its partitions and holds on metric loss."""
    assert scaling_problems(load_installed()) == []


def test_pods_are_hardened() -> None:
    """Non-root, no capabilities, seccomp, read-only root with /tmp on an emptyDir, resources."""
    assert hardening_problems(load_installed()) == []


def test_network_policies_cover_every_pod() -> None:
    """Only named peers reach the ops port of every hifi pod."""
    assert network_problems(load_installed()) == []


def test_environments_are_what_hifi_reads(tmp_path: Path) -> None:
    """Each pod's environment names only what hifi reads and loads as the daemon would."""
    assert env_problems(load_installed(), tmp_path) == []


def test_the_ingest_api_is_reachable() -> None:
    """ingest's API port, its Service and a NetworkPolicy admitting it follow the port its CLI
    listens on, on every address."""
    assert api_problems(load_installed()) == []


def test_ingest_grace_covers_its_whole_stop() -> None:
    """terminationGracePeriodSeconds exceeds ingest's preStop sleep, its drain of the requests
    in flight and its producer's flush, read from the manifest and ingest's flags."""
    assert ingest_grace_problems(load_installed()) == []


def test_ingest_scales_on_cpu_and_never_below_two() -> None:
    """KEDA scales ingest with one cpu trigger on Utilization of its CPU request, 2 replicas
    at least, no fallback."""
    assert ingest_scaling_problems(load_installed()) == []


def test_ingest_loads_the_streams_it_mounts(tmp_path: Path) -> None:
    """The ConfigMap mounted at HIFI_STREAMS_DIR holds streams ingest loads."""
    assert ingest_env_problems(load_installed(), tmp_path) == []


def _spec(docs: list[Doc], kind: str) -> Doc:
    spec: Doc = next(of_kind(docs, kind))["spec"]
    return spec


def _container(docs: list[Doc], daemon: str) -> Doc:
    return next(c for _, c in containers(docs) if c["args"][0] == daemon)


def _named(docs: list[Doc], kind: str, name: str) -> Doc:
    return next(d for d in of_kind(docs, kind) if d["metadata"]["name"] == name)


def _ingest_scaling(docs: list[Doc]) -> Doc:
    spec: Doc = _named(docs, "ScaledObject", "hifi-ingest")["spec"]
    return spec


MUTATIONS: dict[str, tuple[Callable[[list[Doc]], object], str]] = {
    "no fallback": (lambda d: _spec(d, "ScaledObject").pop("fallback"), "fallback"),
    "fallback to six": (
        lambda d: _spec(d, "ScaledObject")["fallback"].update(
            replicas=6, behavior="currentReplicasIfHigher"
        ),
        "fallback takes 1 replicas to 6",
    ),
    "fallback to the minimum": (
        lambda d: _spec(d, "ScaledObject")["fallback"].update(behavior="static"),
        "fallback takes 12 replicas to 1",
    ),
    "breaker ignored": (
        lambda d: _spec(d, "ScaledObject")["triggers"][0]["metadata"].update(
            query='sum(hifi_connector_consumer_lag_records{dest="tvinsight"})'
        ),
        "open breaker",
    ),
    "another destination's breaker": (
        lambda d: _spec(d, "ScaledObject")["triggers"][0]["metadata"].update(
            query=_spec(d, "ScaledObject")["triggers"][0]["metadata"]["query"].replace(
                'breaker_state{dest="tvinsight"}', 'breaker_state{dest="billing"}'
            )
        ),
        'does not select dest="tvinsight"',
    ),
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
    "ingest alone": (lambda d: _ingest_scaling(d).update(minReplicaCount=1), "fewer than 2"),
    "ingest on AverageValue": (
        lambda d: _ingest_scaling(d)["triggers"][0].update(metricType="AverageValue"),
        "Utilization",
    ),
    "ingest fallback": (
        lambda d: _ingest_scaling(d).update(fallback={"failureThreshold": 3, "replicas": 2}),
        "KEDA refuses",
    ),
    "ingest without a cpu request": (
        lambda d: _container(d, "ingest")["resources"]["requests"].pop("cpu"),
        "requests.cpu",
    ),
    "ingest short grace": (
        lambda d: _named(d, "Deployment", "hifi-ingest")["spec"]["template"]["spec"].update(
            terminationGracePeriodSeconds=45
        ),
        "45 s drain",
    ),
    "ingest longer drain": (
        lambda d: _container(d, "ingest")["args"].extend(["--drain-timeout-s", "60"]),
        "75 s drain",
    ),
    "ingest API port": (
        lambda d: _container(d, "ingest")["args"].extend(["--port", "8081"]),
        "listens on 8081",
    ),
    "ingest API on loopback": (
        lambda d: _container(d, "ingest")["args"].extend(["--host", "127.0.0.1"]),
        "127.0.0.1 only",
    ),
    "ingest API closed": (
        lambda d: d.remove(_named(d, "NetworkPolicy", "hifi-ingest-api")),
        "admits its API",
    ),
    "ingest streams unmounted": (
        lambda d: _container(d, "ingest")["volumeMounts"].pop(0),
        "HIFI_STREAMS_DIR",
    ),
    "API open beyond ingest": (
        lambda d: _named(d, "NetworkPolicy", "hifi-ingest-api")["spec"]["podSelector"].update(
            matchLabels={"app.kubernetes.io/part-of": "hifi"}
        ),
        "more than named peers",
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
    docs = copy.deepcopy(load_installed())
    mutate(docs)
    problems = [
        *ops_port_problems(docs),
        *grace_problems(docs, tmp_path),
        *scaling_problems(docs),
        *network_problems(docs),
        *hardening_problems(docs),
        *env_problems(docs, tmp_path),
        *api_problems(docs),
        *ingest_grace_problems(docs),
        *ingest_scaling_problems(docs),
        *ingest_env_problems(docs, tmp_path),
    ]
    assert any(expected in p for p in problems), problems
