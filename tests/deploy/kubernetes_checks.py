"""The checks tests/deploy/test_kubernetes.py runs over deploy/kubernetes/: a loader for the
base and the semantic checks, each returning the problems it finds.

`kustomization.yaml` may only list `resources`, which are loaded as they are, so what is
checked is what `kubectl apply -k` applies (test_kubernetes_install.py renders it with the
virtualenv's kubectl and compares). The base holds no Secret: the checks read the one the
install creates from `secret.example.yaml` (`load_installed`). What only the ingest service has
(its API port, its drain, its streams, its CPU scaling) is checked in ingest_checks.py.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import yaml
from prometheus_client.metrics import MetricWrapperBase

from auditor.cli import cli as auditor_cli
from auditor.daemon import SHUTDOWN_TIMEOUT_S as AUDITOR_DRAIN_S
from config.catalog import Catalog
from connector import metrics as connector_metrics
from connector.cli import cli as connector_cli
from hifi.kafka.settings import KafkaSettings
from ingest.cli import cli as ingest_cli
from retrier.cli import cli as retrier_cli

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes"
#: The Secret the install creates before applying the base: its keys, placeholder values.
EXAMPLE_SECRET = BASE / "secret.example.yaml"
DAEMONS: dict[str, click.Command] = {
    "connector": connector_cli,
    "retrier": retrier_cli,
    "auditor": auditor_cli,
    "ingest": ingest_cli,
}
SHIPPED_PACKAGES = ("hifi", "config", "tenants", "connector", "retrier", "auditor", "ingest")
GRACE_MARGIN_S = 15  # the final commit and flushes after the drain deadline
MIN_SCALE_DOWN_WINDOW_S = 300  # each step down is a rebalance
PARTITIONS_ANNOTATION = "hifi/source-partitions"
BREAKER_METRIC = "hifi_connector_breaker_state"  # 0 closed, 1 half-open, 2 open
WORKLOADS = ("Deployment", "StatefulSet")
#: The container port of ingest's API: the one port beside ops a hifi pod serves.
API_PORT = "http"
API_DAEMONS = ("ingest",)

Doc = dict[str, Any]


def load_base(directory: Path = BASE) -> list[Doc]:
    """Every document of the resources `kustomization.yaml` lists, in order."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - {"apiVersion", "kind", "resources"}
    assert not unsupported, f"kustomization.yaml: {sorted(unsupported)} is not rendered here"
    docs: list[Doc] = []
    for name in kustomization["resources"]:
        docs.extend(read_yaml(directory / name))
    return docs


def read_yaml(path: Path) -> list[Doc]:
    """The documents of a YAML file, parsed with libyaml where PyYAML has it (10 times faster)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(path.read_text(), Loader=loader) if d]


def load_installed(directory: Path = BASE) -> list[Doc]:
    """What runs in the namespace after the install: the base and the Secret created beside it
    (its keys as `secret.example.yaml` lists them)."""
    return [*load_base(directory), *read_yaml(directory / EXAMPLE_SECRET.name)]


def of_kind(docs: list[Doc], *kinds: str) -> Iterator[Doc]:
    return (d for d in docs if d["kind"] in kinds)


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    for workload in of_kind(docs, *WORKLOADS):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            yield workload, container


def pod_env(docs: list[Doc], container: Doc) -> dict[str, str]:
    """The environment the container starts with, Secret values (placeholders) included."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(named(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        value = secret_value(docs, ref) if ref else var["value"]
        if value is not None:  # a missing key: Kubernetes would not start the container
            env[var["name"]] = value
    return env


def secret_value(docs: list[Doc], ref: Doc) -> str | None:
    value: str | None = named(docs, "Secret", ref["name"]).get("stringData", {}).get(ref["key"])
    return value


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def dests_of(args: list[str]) -> list[str]:
    """The destinations a daemon's arguments name (`--dest NAME`, repeatable)."""
    return [value for name, value in itertools.pairwise(args) if name == "--dest"]


def option(command: click.Command, name: str) -> click.Parameter:
    return next(p for p in command.params if p.name == name)


def catalog(
    docs: list[Doc], directory: Path, env: dict[str, str], *, for_delivery: bool
) -> Catalog:
    directory.mkdir(parents=True, exist_ok=True)
    for key, text in named(docs, "ConfigMap", "hifi-destinations")["data"].items():
        (directory / key).write_text(text)
    return Catalog(directory, env, for_delivery=for_delivery)


# --- the semantic checks: each returns its problems ---------------------------------------


def ops_port_problems(docs: list[Doc]) -> list[str]:
    """Each daemon listens where its container, probes and Service say, on every interface."""
    problems = []
    for workload, container in containers(docs):
        where = f"{workload['metadata']['name']}/{container['name']}"
        args, env = container["args"], pod_env(docs, container)
        command = DAEMONS[args[0]]
        port_option = option(command, "metrics_port")
        listens = flag(args, "--metrics-port") or (
            env.get("HIFI_METRICS_PORT") if port_option.envvar == "HIFI_METRICS_PORT" else None
        )
        port = int(listens) if listens is not None else port_option.default
        ops = [p for p in container["ports"] if p["name"] == "ops"]
        if [p["containerPort"] for p in ops] != [port]:
            problems.append(f"{where}: the daemon listens on {port}, the ops port says {ops}")
        if (flag(args, "--metrics-host") or env.get("HIFI_METRICS_HOST")) != "0.0.0.0":
            problems.append(f"{where}: the ops port listens on loopback only")
        for probe, path in (
            ("startupProbe", None),
            ("livenessProbe", "/healthz"),
            ("readinessProbe", "/readyz"),
        ):
            get = container.get(probe, {}).get("httpGet", {})
            if get.get("port") not in ("ops", port) or (path and get.get("path") != path):
                problems.append(f"{where}: {probe} is not {path or 'an HTTP GET'} on the ops port")
        labels = workload["spec"]["template"]["metadata"]["labels"]
        services = [
            s for s in of_kind(docs, "Service") if labels.items() >= s["spec"]["selector"].items()
        ]
        api = [API_PORT] if args[0] in API_DAEMONS else []
        targets = [[p["targetPort"] for p in s["spec"]["ports"]] for s in services]
        for service, ports in zip(services, targets, strict=True):
            if ports not in (["ops"], [port], api):
                problems.append(
                    f"{where}: Service {service['metadata']['name']} misses the ops port"
                )
        if not any(ports in (["ops"], [port]) for ports in targets):
            problems.append(f"{where}: no Service selects its ops port")
    return problems


def grace_problems(docs: list[Doc], tmp_path: Path) -> list[str]:
    """Every pod gets its drain deadline, read from the catalog or the code, and a margin."""
    problems = []
    for workload, container in containers(docs):
        args, env = container["args"], pod_env(docs, container)
        if args[0] in API_DAEMONS:
            continue  # no destinations: ingest_checks.ingest_grace_problems
        dests = catalog(docs, tmp_path / "catalog", env, for_delivery=False).load_named(
            dests_of(args)
        )
        deadline_s = (
            AUDITOR_DRAIN_S if args[0] == "auditor" else max(d.shutdown_timeout_s for d in dests)
        )
        grace_s = workload["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        if grace_s < deadline_s + GRACE_MARGIN_S:
            problems.append(
                f"{workload['metadata']['name']}: terminationGracePeriodSeconds {grace_s} is not"
                f" {GRACE_MARGIN_S} s above its {deadline_s:g} s drain deadline"
            )
    return problems


def scaling_problems(docs: list[Doc]) -> list[str]:
    """Every connector has a ScaledObject on its own lag, capped at its partitions, that holds
    its replicas when the metric is lost and steps down slowly."""
    problems = []
    scaled = {s["spec"]["scaleTargetRef"]["name"]: s for s in of_kind(docs, "ScaledObject")}
    for workload, container in containers(docs):
        if container["args"][0] != "connector":
            continue
        name, dest = workload["metadata"]["name"], flag(container["args"], "--dest")
        if "replicas" in workload["spec"]:
            problems.append(f"{name}: sets replicas, which the ScaledObject owns")
        spec = scaled.get(name, {}).get("spec")
        if spec is None:
            problems.append(f"{name}: no ScaledObject scales it")
            continue
        partitions = int(
            scaled[name]["metadata"].get("annotations", {}).get(PARTITIONS_ANNOTATION, 0)
        )
        low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        if not 1 <= low <= high <= partitions:
            problems.append(f"{name}: replicas {low}..{high} not within 1..{partitions} partitions")
        fallback = spec.get("fallback", {})
        if not (fallback.get("failureThreshold", 0) >= 1 and low <= fallback.get("replicas", 0)):
            problems.append(f"{name}: no fallback that holds between {low} and {high} replicas")
        moved = [(n, fallback_replicas(fallback, n)) for n in range(low, high + 1)]
        problems.extend(f"{name}: fallback takes {n} replicas to {m}" for n, m in moved if n != m)
        behavior = (
            spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
        )
        if (
            behavior.get("scaleDown", {}).get("stabilizationWindowSeconds", 0)
            < MIN_SCALE_DOWN_WINDOW_S
        ):
            problems.append(f"{name}: scale-down window under {MIN_SCALE_DOWN_WINDOW_S} s")
        for trigger in spec["triggers"]:
            problems.extend(trigger_problems(name, dest, trigger))
    return problems


def fallback_replicas(fallback: Doc, current: int) -> int:
    """The count KEDA 2.19's fallback sizes a target of `current` replicas to, by its behavior
    (keda-docs content/docs/2.19/reference/scaledobject-spec.md, "fallback.behavior")."""
    replicas: int = fallback.get("replicas", 0)
    return {
        "static": replicas,
        "currentReplicas": current,
        "currentReplicasIfHigher": max(current, replicas),
        "currentReplicasIfLower": min(current, replicas),
    }[fallback.get("behavior", "static")]


def trigger_problems(name: str, dest: str | None, trigger: Doc) -> list[str]:
    """Fallback only acts on AverageValue triggers whose scaler reports a lost metric as an error."""
    problems = []
    if trigger.get("metricType") != "AverageValue":
        problems.append(f"{name}: trigger metricType is not AverageValue: fallback would not act")
    if trigger["type"] != "prometheus":
        return [*problems, f"{name}: a {trigger['type']} trigger is not checked here"]
    meta = trigger["metadata"]
    if meta.get("ignoreNullValues") != "false":
        problems.append(f'{name}: ignoreNullValues is not "false": a lost series would read as 0')
    known = {
        family.name
        for value in vars(connector_metrics).values()
        if isinstance(value, MetricWrapperBase)
        for family in value.describe()
    }
    for metric in re.findall(r"\bhifi_\w+", meta["query"]):
        if metric not in known:
            problems.append(
                f"{name}: the query reads {metric}, which the connector does not export"
            )
    selectors = re.findall(r"\bhifi_\w+(?:\{[^}]*\})?", meta["query"])
    if not selectors or any(f'dest="{dest}"' not in s for s in selectors):
        problems.append(f'{name}: the query does not select dest="{dest}" in {selectors}')
    if BREAKER_METRIC not in meta["query"]:
        problems.append(f"{name}: the query does not leave out an open breaker ({BREAKER_METRIC})")
    return problems


def network_problems(docs: list[Doc]) -> list[str]:
    """An Ingress policy selects every hifi pod and admits only the ops port, but for the
    API port of ingest's pods, which a policy selecting only them admits (from anywhere)."""
    problems = []
    policies = [
        p["spec"] for p in of_kind(docs, "NetworkPolicy") if "Ingress" in p["spec"]["policyTypes"]
    ]
    for workload, container in containers(docs):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        selecting = [
            p for p in policies if labels.items() >= p["podSelector"]["matchLabels"].items()
        ]
        if not selecting:
            problems.append(f"{workload['metadata']['name']}: no NetworkPolicy selects its pods")
        admitted = {
            port.get("port")
            for policy in selecting
            for rule in policy.get("ingress", [])
            for port in rule.get("ports", [])
        }
        if container["args"][0] in API_DAEMONS and API_PORT not in admitted:
            problems.append(f"{workload['metadata']['name']}: no NetworkPolicy admits its API")
    for policy in policies:
        for rule in policy.get("ingress", []):
            ports = [p.get("port") for p in rule.get("ports", [])]
            if ports == [API_PORT] and _selects_only_api_pods(docs, policy):
                continue
            if ports != ["ops"] or not rule.get("from"):
                problems.append(f"a NetworkPolicy rule admits more than named peers on ops: {rule}")
    return problems


def _selects_only_api_pods(docs: list[Doc], policy: Doc) -> bool:
    selector = policy["podSelector"]["matchLabels"].items()
    selected = [
        container["args"][0]
        for workload, container in containers(docs)
        if workload["spec"]["template"]["metadata"]["labels"].items() >= selector
    ]
    return bool(selected) and all(daemon in API_DAEMONS for daemon in selected)


def env_problems(docs: list[Doc], tmp_path: Path) -> list[str]:
    """Every variable is one hifi reads or one the catalog refers to, every secretKeyRef exists,
    and each pod's environment loads its destinations and Kafka settings as hifi would."""
    problems = []
    read = hifi_env_names()
    referenced = set()
    for text in named(docs, "ConfigMap", "hifi-destinations")["data"].values():
        referenced |= set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text))
    for workload, container in containers(docs):
        where = workload["metadata"]["name"]
        refs = [
            v["valueFrom"]["secretKeyRef"] for v in container.get("env", []) if "valueFrom" in v
        ]
        missing = [f"{r['name']}/{r['key']}" for r in refs if secret_value(docs, r) is None]
        if missing:
            problems.append(f"{where}: secretKeyRef {missing} does not exist")
            continue
        env = pod_env(docs, container)
        unknown = sorted(n for n in env if n not in read and n not in referenced)
        if unknown:
            problems.append(f"{where}: hifi reads none of {unknown}")
        elif container["args"][0] in API_DAEMONS:
            KafkaSettings.from_env(env)  # its streams: ingest_checks.ingest_env_problems
        else:
            KafkaSettings.from_env(env)
            args = container["args"]
            for_delivery = args[0] == "connector"
            catalog(docs, tmp_path / where, env, for_delivery=for_delivery).load_named(
                dests_of(args)
            )
    return problems


def hifi_env_names() -> set[str]:
    """The HIFI_ variables hifi reads: its CLIs' envvars and the names its shipped code quotes."""
    names = {p.envvar for c in DAEMONS.values() for p in c.params if isinstance(p.envvar, str)}
    for package in SHIPPED_PACKAGES:
        for source in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r"[\"'](HIFI_[A-Z0-9_]*[A-Z0-9])[\"']", source.read_text()))
    return names


def hardening_problems(docs: list[Doc]) -> list[str]:
    """Every pod runs as non-root under RuntimeDefault seccomp, without capabilities, on a
    read-only root with a writable /tmp, and asks for its resources."""
    problems = []
    for workload, container in containers(docs):
        where = f"{workload['metadata']['name']}/{container['name']}"
        pod = workload["spec"]["template"]["spec"]
        pod_context, context = pod.get("securityContext", {}), container.get("securityContext", {})
        if not (pod_context.get("runAsNonRoot") and pod_context.get("runAsUser", 0) > 0):
            problems.append(f"{where}: may run as root")
        if pod_context.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            problems.append(f"{where}: no RuntimeDefault seccomp profile")
        if context.get("capabilities", {}).get("drop") != ["ALL"] or context.get(
            "allowPrivilegeEscalation", True
        ):
            problems.append(f"{where}: keeps capabilities or privilege escalation")
        if not context.get("readOnlyRootFilesystem"):
            problems.append(f"{where}: the root filesystem is writable")
        empty_dirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        if mounts.get("/tmp") not in empty_dirs:  # noqa: S108 (a path in the pod, not a file here)
            problems.append(f"{where}: no emptyDir at /tmp")
        resources = container.get("resources", {})
        if not (
            resources.get("requests", {}).keys() >= {"cpu", "memory"}
            and "memory" in resources.get("limits", {})
        ):
            problems.append(f"{where}: no cpu and memory requests and memory limit")
    return problems
