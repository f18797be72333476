"""The systemd units in deploy/systemd/: systemd accepts them, two connector instances run side by
side from them, and each gives its daemon time to drain.

systemd is not PID 1 here, so nothing is started by systemd: `systemd-analyze verify --root`
checks the units against a staged install tree, and the connector instances' command lines and
environments are built from the units as systemd would build them and started directly.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from auditor.daemon import LAST_ROLL_START_S, SHUTDOWN_TIMEOUT_S
from config.destination import Destination
from devstack.destination import TestDestination
from hifi.cli_options import METRICS_PORT_ENV
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.deploy.units import (
    UNITS_DIR,
    Command,
    Unit,
    read_env_file,
    read_units,
    service_command,
    stage_root,
)
from tests.helpers import make_destination, wait_exit

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None,
    reason="no systemd-analyze (Debian's systemd package; `make systemd` installs it as root)",
)
#: What a unit's TimeoutStopSec must leave beyond its daemon's drain deadline (the final
#: commit, closing the clients and the ops server).
STOP_MARGIN_S = 15.0
DEFAULT_SHUTDOWN_TIMEOUT_S = Destination.model_fields["shutdown_timeout_s"].default
#: The longest a daemon may take from SIGTERM to exit, as its code and catalog defaults say.
DRAIN_DEADLINE_S = {
    "connector@.service": DEFAULT_SHUTDOWN_TIMEOUT_S,
    "retrier.service": DEFAULT_SHUTDOWN_TIMEOUT_S,  # the largest of its destinations'
    "auditor.service": LAST_ROLL_START_S + SHUTDOWN_TIMEOUT_S,
}
HARDENING = {
    "NoNewPrivileges": "yes",
    "CapabilityBoundingSet": "",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "SystemCallFilter": "@system-service",
}


def _shared_env(bootstrap: str) -> str:
    """deploy/systemd/env.example as an operator fills it in: the test broker's bootstrap."""
    example = (UNITS_DIR / "env.example").read_text()
    filled, count = re.subn(
        r"(?m)^HIFI_KAFKA_BOOTSTRAP=.*$", f"HIFI_KAFKA_BOOTSTRAP={bootstrap}", example
    )
    assert count == 1, "env.example sets HIFI_KAFKA_BOOTSTRAP once"
    return filled


def _instance_env(port: int) -> str:
    """deploy/systemd/instance.env.example with this instance's port."""
    example = (UNITS_DIR / "instance.env.example").read_text()
    filled, count = re.subn(rf"(?m)^{METRICS_PORT_ENV}=.*$", f"{METRICS_PORT_ENV}={port}", example)
    assert count == 1, f"instance.env.example sets {METRICS_PORT_ENV} once"
    return filled


def _verify(root: Path, *units: str) -> tuple[int, list[str]]:
    """`systemd-analyze verify --root` over `units`: its exit code and the lines naming ours."""
    assert SYSTEMD_ANALYZE is not None
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", f"--root={root}", *units],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    ours = ("connector@", "retrier.service", "auditor.service", "/opt/hifi", "/etc/hifi")
    lines = (done.stdout + done.stderr).splitlines()
    return done.returncode, [line for line in lines if any(name in line for name in ours)]


@pytest.mark.integration
@needs_systemd_analyze
def test_systemd_analyze_verify_accepts_every_unit(tmp_path: Path) -> None:
    """Against a tree laid out as the install steps leave it, `systemd-analyze verify` has
    nothing to say about any unit: keys, values, specifiers and the programs they run."""
    root = stage_root(tmp_path / "root", _shared_env("127.0.0.1:9092"))
    code, about_ours = _verify(
        root,
        "connector@alpha.service",
        "connector@beta.service",
        "retrier.service",
        "auditor.service",
    )
    assert about_ours == []
    assert code == 0


@pytest.mark.integration
@needs_systemd_analyze
def test_systemd_analyze_verify_reports_a_program_that_is_not_installed(tmp_path: Path) -> None:
    """The same check over the connector unit as it was (running /opt/hifi/.venv/bin/connector,
    where nothing installs it) reports it, so the check above can fail."""
    root = stage_root(tmp_path / "root", _shared_env("127.0.0.1:9092"))
    unit = root / "etc" / "systemd" / "system" / "connector@.service"
    unit.write_text(unit.read_text().replace("/opt/hifi/bin/", "/opt/hifi/.venv/bin/"))
    code, about_ours = _verify(root, "connector@alpha.service")
    assert "Command /opt/hifi/.venv/bin/connector is not executable" in "\n".join(about_ours)
    assert code != 0


#: The highest `systemd-analyze security` exposure a unit may have (0 best, 10 worst; 1.7 when
#: written, 8.5 for the connector unit before it was hardened).
MAX_EXPOSURE = 2.0
_EXPOSURE = re.compile(r"Overall exposure level for (\S+): ([0-9.]+)")


@pytest.mark.integration
@needs_systemd_analyze
def test_systemd_analyze_security_rates_every_unit_ok(tmp_path: Path) -> None:
    """systemd's own review of the sandbox (`security --offline`) rates each unit's exposure
    at most MAX_EXPOSURE."""
    assert SYSTEMD_ANALYZE is not None
    root = stage_root(tmp_path / "root", _shared_env("127.0.0.1:9092"))
    units = ["connector@alpha.service", "retrier.service", "auditor.service"]
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=yes", f"--root={root}", "--no-pager", *units],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    exposure = {name: float(level) for name, level in _EXPOSURE.findall(done.stdout)}
    assert sorted(exposure) == sorted(units), done.stdout + done.stderr
    assert all(level <= MAX_EXPOSURE for level in exposure.values()), exposure


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(command: Command, log_path: Path) -> subprocess.Popen[bytes]:
    """Run `command` as systemd would (its environment only, no stdin), logging to `log_path`."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            command.argv,
            env=command.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


async def _until_ready(client: httpx.AsyncClient, port: int, timeout_s: float) -> str:
    """The `/readyz` body once the daemon on `port` answers 200."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                found = await client.get(f"http://127.0.0.1:{port}/readyz")
                if found.status_code == 200:
                    return found.text
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)


async def test_two_connector_instances_run_side_by_side_from_the_unit(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """Two `connector@` instances, each with its own /etc/hifi/NAME.env beside the shared
    /etc/hifi/env, started from the unit's ExecStart and environment, are ready on their own
    ports at once, each serving its own destination, and each drains and exits 0 on the unit's
    KillSignal well within TimeoutStopSec."""
    unit = read_units()["connector@.service"]
    root = stage_root(tmp_path / "root", _shared_env(kafka_settings.bootstrap))
    names = [f"{unique}a", f"{unique}b"]
    await kafka_admin.ensure_topics(kafka_settings, names, partitions=1)
    ports: dict[str, int] = {}
    for name in names:
        make_destination(root / "etc/hifi/destinations", name, destination.url, name)
        (root / "etc/hifi" / f"{name}.env").write_text(_instance_env(_free_port()))
        command = service_command(unit, name, root)
        ports[name] = int(command.env[METRICS_PORT_ENV])
        processes.append(_start(command, tmp_path / f"{name}.log"))
    assert len(set(ports.values())) == 2
    async with httpx.AsyncClient(timeout=5) as client:
        for name, port in ports.items():
            logs = (tmp_path / f"{name}.log").read_text
            try:
                await _until_ready(client, port, timeout_s=60)
            except TimeoutError:
                pytest.fail(f"connector@{name} not ready on {port}:\n{logs()}")
            status = (await client.get(f"http://127.0.0.1:{port}/status")).json()
            assert status["dest"] == name
    stop_signal = signal.Signals[f"{unit.value('KillSignal')}"]
    for process in processes:
        process.send_signal(stop_signal)
    for name, process in zip(names, processes, strict=True):
        code = await wait_exit(process, float(unit.value("TimeoutStopSec")))
        assert code == 0, (tmp_path / f"{name}.log").read_text()


def test_an_instance_reads_its_own_env_file_after_the_shared_one(tmp_path: Path) -> None:
    """The connector instance's environment: the shared file, then /etc/hifi/NAME.env (required,
    so an instance never runs on another's port) whose port wins over a stray shared one."""
    unit = read_units()["connector@.service"]
    assert unit.values("EnvironmentFile") == ["-/etc/hifi/env", "/etc/hifi/%i.env"]
    etc = tmp_path / "etc" / "hifi"
    etc.mkdir(parents=True)
    (etc / "env").write_text(f"HIFI_KAFKA_BOOTSTRAP=k:9092\n{METRICS_PORT_ENV}=9400\n")
    (etc / "alpha.env").write_text(f"# alpha's port\n{METRICS_PORT_ENV}='9404'\n")
    command = service_command(unit, "alpha", tmp_path)
    assert command.argv == [
        f"{tmp_path}/opt/hifi/bin/connector",
        "--dest",
        "alpha",
        "--log-format",
        "json",
    ]
    assert command.env[METRICS_PORT_ENV] == "9404"
    assert command.env["HIFI_KAFKA_BOOTSTRAP"] == "k:9092"
    assert command.env["HIFI_CATALOG_DIR"] == f"{tmp_path}/etc/hifi/destinations"


def test_no_shared_setting_picks_a_port() -> None:
    """Neither a unit every daemon shares settings with nor the shared env file's example sets
    the ops port: each daemon keeps its own default or its instance's file."""
    shared = read_env_file(UNITS_DIR / "env.example")
    assert METRICS_PORT_ENV not in shared
    for unit in read_units().values():
        assert not any(METRICS_PORT_ENV in value for value in unit.values("Environment"))


@pytest.mark.parametrize("name", sorted(DRAIN_DEADLINE_S))
def test_each_unit_waits_longer_than_its_daemon_drains(name: str) -> None:
    """TimeoutStopSec leaves the daemon its whole drain deadline (from the code and catalog
    defaults) and a margin, so systemd never SIGKILLs a drain that would have finished."""
    unit = read_units()[name]
    timeout = unit.value("TimeoutStopSec")
    assert re.fullmatch(r"\d+", timeout), f"{name}: TimeoutStopSec in plain seconds"
    assert float(timeout) >= DRAIN_DEADLINE_S[name] + STOP_MARGIN_S
    assert unit.value("KillSignal") == "SIGTERM"


@pytest.mark.parametrize("unit", list(read_units().values()), ids=lambda unit: unit.name)
def test_each_unit_is_hardened_and_stays_down_on_bad_configuration(unit: Unit) -> None:
    """Every unit runs as the hifi user without privileges, confined, from the one install
    path, and is not restarted after exit 2 (bad configuration)."""
    for key, value in HARDENING.items():
        assert unit.values(key) == [value], (unit.name, key)
    assert unit.value("User") == "hifi"
    assert unit.value("RestartPreventExitStatus") == "2"
    assert unit.value("Restart") == "on-failure"
    assert unit.value("ExecStart").startswith("/opt/hifi/bin/")
    assert unit.value("StateDirectory") == "hifi"
