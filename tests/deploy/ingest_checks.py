"""The checks of deploy/kubernetes/ that only the ingest service needs, each returning its
problems: its API port, its stop (preStop, drain, producer flush), the streams it mounts and
its KEDA scaling on CPU. kubernetes_checks.py checks what it shares with the other daemons.
"""

from __future__ import annotations

from pathlib import Path

from config.streams import load_streams
from hifi.environment import REDIS_URL_ENV_VAR, STREAMS_ENV_VAR
from hifi.lookup_cache.redis_hash import RedisSettings
from ingest.cli import cli as ingest_cli
from tests.deploy.kubernetes_checks import (
    API_PORT,
    GRACE_MARGIN_S,
    Doc,
    containers,
    flag,
    named,
    of_kind,
    option,
    pod_env,
)

MIN_REPLICAS = 2  # one draining or evicted never closes the front door
EVERY_ADDRESS = ("0.0.0.0", "::")


def ingest_containers(docs: list[Doc]) -> list[tuple[Doc, Doc]]:
    return [(w, c) for w, c in containers(docs) if c["args"][0] == "ingest"]


def setting(args: list[str], name: str) -> str:
    """The value of option `name` (`--drain-timeout-s` for drain_timeout_s) as ingest runs:
    its flag in `args`, else its default."""
    given = flag(args, "--" + name.replace("_", "-"))
    return given if given is not None else str(option(ingest_cli, name).default)


def stop_s(container: Doc) -> float:
    """The longest an ingest pod takes from the stop to its exit: the preStop sleep, then the
    drain of the requests in flight, then the producer's flush (up to the ack timeout)."""
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
    args = container["args"]
    drain_s = float(setting(args, "drain_timeout_s"))
    return float(pre_stop.get("seconds", 0)) + drain_s + float(setting(args, "ack_timeout_s"))


def api_problems(docs: list[Doc]) -> list[str]:
    """ingest's API listens on every address on the port its container's `http` port names,
    and a Service reaches it there."""
    problems = []
    for workload, container in ingest_containers(docs):
        where = f"{workload['metadata']['name']}/{container['name']}"
        port = int(setting(container["args"], "port"))
        host = setting(container["args"], "host")
        declared = [p["containerPort"] for p in container["ports"] if p["name"] == API_PORT]
        if declared != [port]:
            problems.append(
                f"{where}: the API listens on {port}, the {API_PORT} port says {declared}"
            )
        if host not in EVERY_ADDRESS:
            problems.append(f"{where}: the API listens on {host} only")
        labels = workload["spec"]["template"]["metadata"]["labels"]
        reaching = [
            s
            for s in of_kind(docs, "Service")
            if labels.items() >= s["spec"]["selector"].items()
            and [p["targetPort"] for p in s["spec"]["ports"]] in ([API_PORT], [port])
        ]
        if not reaching:
            problems.append(f"{where}: no Service reaches its API")
    return problems


def ingest_grace_problems(docs: list[Doc]) -> list[str]:
    """Each ingest pod gets its whole stop, read from its manifest and ingest's flags, and a margin."""
    problems = []
    for workload, container in ingest_containers(docs):
        deadline_s = stop_s(container)
        grace_s = workload["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        if grace_s < deadline_s + GRACE_MARGIN_S:
            problems.append(
                f"{workload['metadata']['name']}: terminationGracePeriodSeconds {grace_s} is not"
                f" {GRACE_MARGIN_S} s above its {deadline_s:g} s drain deadline"
            )
    return problems


def ingest_env_problems(docs: list[Doc], tmp_path: Path) -> list[str]:
    """Each ingest pod mounts a ConfigMap (or Secret) at its HIFI_STREAMS_DIR whose files load
    as ingest loads them, and its Redis URL is one ingest can use."""
    problems = []
    for workload, container in ingest_containers(docs):
        where = workload["metadata"]["name"]
        env = pod_env(docs, container)
        data = mounted_data(docs, workload, container, env.get(STREAMS_ENV_VAR))
        if data is None:
            problems.append(f"{where}: no ConfigMap or Secret is mounted at ${STREAMS_ENV_VAR}")
            continue
        directory = tmp_path / f"{where}-streams"
        directory.mkdir(parents=True, exist_ok=True)
        for key, text in data.items():
            (directory / key).write_text(text)
        load_streams(directory)
        if REDIS_URL_ENV_VAR in env:
            RedisSettings.from_env(env)
    return problems


def mounted_data(
    docs: list[Doc], workload: Doc, container: Doc, path: str | None
) -> dict[str, str] | None:
    """The files of the ConfigMap or Secret `container` mounts at `path`, by name."""
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    volume = volumes.get(mounts.get(path or "", ""), {})
    if "configMap" in volume:
        found: dict[str, str] = named(docs, "ConfigMap", volume["configMap"]["name"])["data"]
        return found
    if "secret" in volume:
        secret: dict[str, str] = named(docs, "Secret", volume["secret"]["secretName"])["stringData"]
        return secret
    return None


def ingest_scaling_problems(docs: list[Doc]) -> list[str]:
    """ingest has a ScaledObject with one KEDA `cpu` trigger (Utilization, which needs the
    container's CPU request), no fallback (KEDA refuses one next to a CPU trigger), at least
    MIN_REPLICAS, and no replica count of its own."""
    problems = []
    scaled = {s["spec"]["scaleTargetRef"]["name"]: s["spec"] for s in of_kind(docs, "ScaledObject")}
    for workload, container in ingest_containers(docs):
        name = workload["metadata"]["name"]
        if "replicas" in workload["spec"]:
            problems.append(f"{name}: sets replicas, which the ScaledObject owns")
        spec = scaled.get(name)
        if spec is None:
            problems.append(f"{name}: no ScaledObject scales it")
            continue
        low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        if not MIN_REPLICAS <= low <= high:
            problems.append(f"{name}: replicas {low}..{high}: fewer than {MIN_REPLICAS} replicas")
        if "fallback" in spec:
            problems.append(f"{name}: a fallback next to a cpu trigger, which KEDA refuses")
        triggers = [(t["type"], t.get("metricType")) for t in spec["triggers"]]
        if triggers != [("cpu", "Utilization")]:
            problems.append(f"{name}: triggers {triggers}, not one cpu trigger on Utilization")
        target = spec["triggers"][0]["metadata"].get("containerName", container["name"])
        if target != container["name"]:
            problems.append(f"{name}: the cpu trigger reads container {target}")
        if "cpu" not in container.get("resources", {}).get("requests", {}):
            problems.append(f"{name}: Utilization is a share of resources.requests.cpu: none set")
    return problems
