"""The image's healthcheck (deploy/container/healthcheck.py): it finds the hifi daemon among the
container's processes and probes `/readyz` on the port that daemon uses."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import httpx
import prometheus_client
import pytest

from hifi.ops_http import OpsServer, Readiness
from tests.deploy.kubernetes_checks import DAEMONS, option

ROOT = Path(__file__).resolve().parents[2]


def _load_healthcheck() -> ModuleType:
    path = ROOT / "deploy" / "container" / "healthcheck.py"
    spec = importlib.util.spec_from_file_location("hifi_container_healthcheck", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


healthcheck = _load_healthcheck()


def _process(proc: Path, pid: int, argv: list[str], env: dict[str, str]) -> None:
    """A process as /proc shows it: NUL-separated argv and environment."""
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    environ = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
    (proc / str(pid) / "environ").write_bytes(environ)


def test_healthcheck_finds_the_daemon_the_entrypoint_execs_or_an_init_runs(tmp_path: Path) -> None:
    """The daemon is found as PID 1 (`PYTHON SCRIPT ARGS`) or under an init, never itself."""
    exec_d = tmp_path / "exec"
    _process(
        exec_d, 1, ["/opt/hifi/bin/python3", "/opt/hifi/bin/retrier", "--log-level", "INFO"], {}
    )
    _process(exec_d, 40, ["/opt/hifi/bin/python3", "/opt/hifi/bin/hifi-healthcheck"], {})
    found = healthcheck.find_command(exec_d, own_pid=40)
    assert (found.name, found.args) == ("retrier", ("--log-level", "INFO"))

    under_init = tmp_path / "init"
    _process(under_init, 1, ["/run/podman-init", "--", "/opt/hifi/bin/hifi-entrypoint"], {})
    _process(under_init, 7, ["/opt/hifi/bin/auditor", "--dest", "a"], {"HIFI_METRICS_PORT": "9500"})
    found = healthcheck.find_command(under_init, own_pid=9)
    assert (found.name, found.args, found.env["HIFI_METRICS_PORT"]) == (
        "auditor",
        ("--dest", "a"),
        "9500",
    )

    alone = tmp_path / "alone"
    _process(alone, 3, ["/opt/hifi/bin/python3", "/opt/hifi/bin/hifi-healthcheck"], {})
    assert healthcheck.find_command(alone, own_pid=3) is None
    with pytest.raises(healthcheck.Unhealthy, match="no hifi command"):
        healthcheck.check(alone, own_pid=3)


def test_healthcheck_probes_the_port_the_daemon_uses() -> None:
    """The port is the daemon's `--metrics-port`, else its HIFI_METRICS_PORT, else its default;
    an every-address host is probed on loopback."""
    command = healthcheck.Command

    def url(name: str, args: tuple[str, ...] = (), **env: str) -> str:
        return str(healthcheck.readyz_url(command(name=name, args=args, env=env)))

    assert url("connector") == "http://127.0.0.1:9400/readyz"
    assert url("retrier") == "http://127.0.0.1:9401/readyz"
    assert url("auditor", HIFI_METRICS_HOST="0.0.0.0") == "http://127.0.0.1:9402/readyz"
    assert url("retrier", HIFI_METRICS_PORT="9511") == "http://127.0.0.1:9511/readyz"
    assert url("ingest", ("--port", "8080")) == "http://127.0.0.1:9403/readyz"
    flags = ("--dest", "a", "--metrics-port", "9600")
    assert url("connector", flags, HIFI_METRICS_PORT="9511") == "http://127.0.0.1:9600/readyz"
    assert url("connector", ("--metrics-port=9601",)) == "http://127.0.0.1:9601/readyz"
    assert url("connector", ("--metrics-host", "10.1.2.3")) == "http://10.1.2.3:9400/readyz"
    with pytest.raises(healthcheck.Unhealthy, match="HIFI_METRICS_PORT 'x'"):
        url("connector", HIFI_METRICS_PORT="x")
    with pytest.raises(healthcheck.Unhealthy, match="--metrics-port '0'"):
        url("connector", ("--metrics-port", "0"))


def test_the_default_ports_are_the_daemons_own() -> None:
    """Each daemon's default port in the healthcheck is its CLI's `--metrics-port` default, and
    every daemon the entrypoint runs has one."""
    defaults = {name: option(cli, "metrics_port").default for name, cli in DAEMONS.items()}
    assert defaults == healthcheck.DEFAULT_PORTS


async def test_healthcheck_is_healthy_only_while_the_daemon_is_ready(tmp_path: Path) -> None:
    """Against a daemon's real ops server: 503 `not ready` is unhealthy with its detail, 200 is
    healthy, a port nothing listens on is unhealthy; a one-shot command is not probed."""
    ops = OpsServer(port=0, component="test", registry=prometheus_client.CollectorRegistry())
    ops.require(lambda: Readiness(ready=True, detail="tenant entries: 3 loaded"))
    async with ops.running(), httpx.AsyncClient() as http:
        assert (await http.get(f"http://127.0.0.1:{ops.port}/healthz")).status_code == 200
        argv = ["/opt/hifi/bin/python3", "/opt/hifi/bin/connector", "--metrics-port", str(ops.port)]
        _process(tmp_path / "proc", 1, argv, {})
        with pytest.raises(healthcheck.Unhealthy, match="503 not ready; starting"):
            await asyncio.to_thread(healthcheck.check, tmp_path / "proc", 99)
        ops.ready = True
        said = await asyncio.to_thread(healthcheck.check, tmp_path / "proc", 99)
        assert (
            said
            == f"connector ready: http://127.0.0.1:{ops.port}/readyz ready; tenant entries: 3 loaded"
        )
    with pytest.raises(healthcheck.Unhealthy, match=r"no answer .*refused"):
        await asyncio.to_thread(healthcheck.check, tmp_path / "proc", 99)
    _process(tmp_path / "tool", 1, ["/opt/hifi/bin/hifi-tenants", "diff", "--dest", "a"], {})
    assert "no ops port" in healthcheck.check(tmp_path / "tool", 99)
