"""A Spark standalone cluster on loopback: one master and one worker, from the pyspark package.

The pyspark package ships `bin/spark-class` and `bin/spark-submit` but not the `sbin/start-*`
scripts, so the master and the worker are started here as Spark's scripts would start them:
`spark-class org.apache.spark.deploy.master.Master` and `...deploy.worker.Worker`, each its own
process group (the worker's executors are its children), stopped with it whatever happens.

    with standalone_cluster(workdir, cores=1, memory_mb=1024) as cluster:
        subprocess.run(cluster.submit_command(...), ...)
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from devstack.ports import free_port

LOOPBACK = "127.0.0.1"
_DAEMON_MEMORY = "256m"  # the master's and the worker's own heaps (Spark's default is 1g each)
_READY_TIMEOUT_S = 120.0  # a busy 2-core machine: 10 s idle, over a minute under a benchmark
_STOP_TIMEOUT_S = 15.0
_POLL_S = 0.25


class ClusterFailed(RuntimeError):
    """The master or the worker did not start; the message names which and its log."""


@dataclass(frozen=True)
class Cluster:
    """A running cluster: its master URL, where Spark's scripts are, the environment they ran
    with (spark-submit takes it too), and the daemons' logs."""

    master_url: str
    spark_home: Path
    ui_port: int
    env: dict[str, str]
    logs: dict[str, Path]

    @property
    def spark_submit(self) -> Path:
        return self.spark_home / "bin" / "spark-submit"

    def alive_workers(self) -> int:
        """How many workers the master counts alive."""
        return int(self._state().get("aliveworkers", 0))

    def applications(self) -> list[dict[str, Any]]:
        """The applications the master ran or runs (`name`, `state`, `cores`...)."""
        state = self._state()
        return [*state.get("completedapps", []), *state.get("activeapps", [])]

    def _state(self) -> dict[str, Any]:
        """The master's state, from its web UI's JSON."""
        url = f"http://{LOOPBACK}:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as reply:
            return msgspec.json.decode(reply.read(), type=dict[str, Any])


def pyspark_home() -> Path:
    """The pyspark package's directory: its `bin/` has spark-class and spark-submit."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterFailed("pyspark is not installed: pip install 'hifi-streams[spark]'")
    return Path(next(iter(spec.submodule_search_locations)))


def spark_environment(spark_home: Path, workdir: Path) -> dict[str, str]:
    """The environment Spark's scripts get here: this SPARK_HOME, an empty configuration
    directory (no spark-defaults.conf of the machine), loopback, no PYTHONPATH of ours."""
    conf_dir = workdir / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
    env.update(
        {
            "SPARK_HOME": str(spark_home),
            "SPARK_CONF_DIR": str(conf_dir),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_DAEMON_MEMORY": _DAEMON_MEMORY,
            # two small daemons: the quick compiler only, the serial collector
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "SPARK_NO_DAEMONIZE": "1",
            # no REST submission server: it takes port 6066 whatever --port says
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
    )
    return env


@contextlib.contextmanager
def standalone_cluster(
    workdir: Path, *, cores: int = 1, memory_mb: int = 1024
) -> Iterator[Cluster]:
    """A master and one worker with `cores` and `memory_mb` for executors, on free loopback
    ports; both stopped (with any executor) when the block ends, however it ends."""
    spark_home = pyspark_home()
    workdir.mkdir(parents=True, exist_ok=True)
    env = spark_environment(spark_home, workdir)
    port, ui_port = free_port(), free_port()
    master_url = f"spark://{LOOPBACK}:{port}"
    logs = {"master": workdir / "master.log", "worker": workdir / "worker.log"}
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(
            _start(
                spark_home,
                "org.apache.spark.deploy.master.Master",
                ["--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)],
                env=env,
                log_path=logs["master"],
                cwd=workdir,
            )
        )
        cluster = Cluster(master_url, spark_home, ui_port, env, logs)
        _wait(lambda: _answers(cluster), started, "master", logs["master"])
        started.append(
            _start(
                spark_home,
                "org.apache.spark.deploy.worker.Worker",
                [
                    *("--host", LOOPBACK, "--webui-port", str(free_port())),
                    *("--cores", str(cores), "--memory", f"{memory_mb}m"),
                    *("--work-dir", str(workdir / "work"), master_url),
                ],
                env=env,
                log_path=logs["worker"],
                cwd=workdir,
            )
        )
        _wait(lambda: cluster.alive_workers() >= 1, started, "worker", logs["worker"])
        yield cluster
    finally:
        for process in reversed(started):
            _stop(process)


def _start(
    spark_home: Path,
    main_class: str,
    args: list[str],
    *,
    env: dict[str, str],
    log_path: Path,
    cwd: Path,
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [str(spark_home / "bin" / "spark-class"), main_class, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own group: the worker's executors stop with it
        )


def _answers(cluster: Cluster) -> bool:
    try:
        cluster.alive_workers()
    except OSError:
        return False
    return True


def _wait(
    ready: Callable[[], bool], started: list[subprocess.Popen[bytes]], what: str, log_path: Path
) -> None:
    """Until `ready()` is true; a daemon that exits or a timeout raises, naming its log."""
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while True:
        with contextlib.suppress(OSError, ValueError):
            if ready():
                return
        if any(process.poll() is not None for process in started):
            raise ClusterFailed(f"the Spark {what} exited while starting; see {log_path}")
        if time.monotonic() >= deadline:
            raise ClusterFailed(
                f"the Spark {what} not ready in {_READY_TIMEOUT_S:.0f} s; see {log_path}"
            )
        time.sleep(_POLL_S)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the daemon's group (Spark's shutdown hooks stop the executors), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
            break
        except subprocess.TimeoutExpired:
            continue
    # the group may outlive its leader (an executor): nothing of it stays
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
