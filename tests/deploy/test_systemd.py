"""The systemd units in deploy/systemd/: systemd accepts them, two connector instances, the retrier,
the auditor and ingest run side by side from them, and each gives its daemon time to drain.

systemd is not PID 1 here, so nothing is started by systemd: `systemd-analyze verify --root`
checks the units against a staged install tree, and the daemons' command lines and environments
are built from the installed units as systemd would build them and started directly.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from auditor.daemon import LAST_ROLL_START_S, SHUTDOWN_TIMEOUT_S
from config.destination import Destination
from config.streams import hash_token
from devstack.destination import TestDestination
from hifi.cli_options import METRICS_PORT_ENV
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.deploy.ingest_checks import setting
from tests.deploy.units import (
    SYSTEM_DIR,
    UNITS_DIR,
    Command,
    Unit,
    read_env_file,
    read_units,
    service_command,
    stage_root,
)
from tests.helpers import make_destination, wait_exit
from tests.ingest.support import TOKEN, auth, write_stream

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
    # the requests in flight, then the producer's flush, which waits for the broker's acks
    "ingest.service": float(setting([], "drain_timeout_s")) + float(setting([], "ack_timeout_s")),
}
#: The units whose daemon keeps files across restarts, in the state directory.
STATEFUL = ("connector@.service", "retrier.service", "auditor.service")
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


def _instance_env(port: int, example_name: str = "instance.env.example") -> str:
    """deploy/systemd/instance.env.example (or another unit's own example) with this port."""
    example = (UNITS_DIR / example_name).read_text()
    filled, count = re.subn(rf"(?m)^{METRICS_PORT_ENV}=.*$", f"{METRICS_PORT_ENV}={port}", example)
    assert count == 1, f"{example_name} sets {METRICS_PORT_ENV} once"
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
    ours = (
        "connector@",
        "retrier.service",
        "auditor.service",
        "ingest.service",
        "/opt/hifi",
        "/etc/hifi",
    )
    lines = (done.stdout + done.stderr).splitlines()
    return done.returncode, [line for line in lines if any(name in line for name in ours)]


@pytest.mark.integration
@needs_systemd_analyze
def test_systemd_analyze_verify_accepts_every_unit(tmp_path: Path) -> None:
    """Against a tree laid out as the install steps leave it, `systemd-analyze verify` has
    nothing to say about any unit: keys, values, specifiers and the programs they run (that it
    can say something: test_systemd_docs.py)."""
    root = stage_root(tmp_path / "root", _shared_env("127.0.0.1:9092"))
    code, about_ours = _verify(
        root,
        "connector@alpha.service",
        "connector@beta.service",
        "retrier.service",
        "auditor.service",
        "ingest.service",
    )
    assert about_ours == []
    assert code == 0


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
    units = ["connector@alpha.service", "retrier.service", "auditor.service", "ingest.service"]
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


async def _readyz(client: httpx.AsyncClient, port: int) -> str:
    """What `/readyz` on `port` answers now, or why it does not."""
    try:
        found = await client.get(f"http://127.0.0.1:{port}/readyz")
    except httpx.TransportError as exc:
        return repr(exc)
    return f"{found.status_code} {found.text}"


@dataclass
class _Started:
    """One unit's instance started from its command line: where it listens and logs."""

    unit: Unit
    port: int
    log_path: Path
    process: subprocess.Popen[bytes]


def _start_unit(root: Path, name: str, instance: str | None, work: Path) -> _Started:
    """Start unit `name` (instance `instance` of a template) from its installed files."""
    unit = Unit.installed(root, name, instance)
    command = service_command(unit, instance or "", root)
    log_path = work / f"{unit.instance(instance or '')}.log"
    port = int(command.env[METRICS_PORT_ENV])
    return _Started(unit, port, log_path, _start(command, log_path))


def _exec_start(name: str) -> str:
    """The command line unit `name` ships with."""
    return read_units()[name].value("ExecStart")


def _drop_in(root: Path, name: str, exec_start: str | None = None, **env: str) -> None:
    """What `systemctl edit NAME` leaves: a drop-in setting `env` for the unit and, with
    `exec_start`, replacing its command line (an empty `ExecStart=` first, as systemd needs)."""
    folder = root / SYSTEM_DIR / f"{name}.d"
    folder.mkdir(parents=True)
    lines = "".join(f"Environment={key}={value}\n" for key, value in env.items())
    if exec_start is not None:
        lines += f"ExecStart=\nExecStart={exec_start}\n"
    (folder / "override.conf").write_text(f"[Service]\n{lines}")


async def _stage_ingest(root: Path, kafka_settings: KafkaSettings, unique: str) -> int:
    """A stream `clicks` on a new topic in /etc/hifi/streams, /etc/hifi/ingest.env from its
    example with a free ops port, and a drop-in moving the API to a free port, which it returns."""
    topic = f"{unique}.clicks"
    await kafka_admin.ensure_topics(kafka_settings, [topic], partitions=1)
    write_stream(
        root / "etc/hifi/streams", "clicks", topic=topic, tokens_sha256=[hash_token(TOKEN)]
    )
    (root / "etc/hifi/ingest.env").write_text(_instance_env(_free_port(), "ingest.env.example"))
    api_port = _free_port()
    exec_start = f"{_exec_start('ingest.service')} --port {api_port}"
    _drop_in(root, "ingest.service", exec_start=exec_start)
    return api_port


async def test_every_unit_runs_side_by_side_on_its_own_port(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """Two `connector@` instances (each with its /etc/hifi/NAME.env), the retrier, the auditor
    (ports and, to keep clear of other tests' members, groups moved by drop-ins, as
    `systemctl edit` does) and ingest (its ops port in
    /etc/hifi/ingest.env, its API's in a drop-in) started from the installed units' command
    lines and environments are all ready on their own ports at once: each connector serves its
    own destination, the retrier's dashboard holds the token from its credential, ingest
    accepts an event of the stream in /etc/hifi/streams, and each daemon exits 0 on the unit's
    KillSignal within TimeoutStopSec, the auditor leaving its archive in the state directory."""
    shared = _shared_env(kafka_settings.bootstrap) + f"HIFI_AUDIT_TOPIC={unique}.audit\n"
    root = stage_root(tmp_path / "root", shared)
    names = [f"{unique}a", f"{unique}b"]
    await kafka_admin.ensure_topics(kafka_settings, names, partitions=1)
    for name in names:
        make_destination(root / "etc/hifi/destinations", name, destination.url, name)
        (root / "etc/hifi" / f"{name}.env").write_text(_instance_env(_free_port()))
    auditor_port = _free_port()
    _drop_in(
        root,
        "auditor.service",
        exec_start=f"{_exec_start('auditor.service')} --group {unique}.a",
        **{METRICS_PORT_ENV: str(auditor_port)},
    )
    _drop_in(
        root,
        "retrier.service",
        exec_start=f"{_exec_start('retrier.service')} --group {unique}.r",
        HIFI_METRICS_PORT=str(_free_port()),
        HIFI_AUDITOR_URL=f"http://127.0.0.1:{auditor_port}",
    )
    api_port = await _stage_ingest(root, kafka_settings, unique)
    started = {name: _start_unit(root, "connector@.service", name, tmp_path) for name in names}
    for daemon in ("retrier", "auditor", "ingest"):
        started[daemon] = _start_unit(root, f"{daemon}.service", None, tmp_path)
    processes.extend(one.process for one in started.values())
    assert len({one.port for one in started.values()} | {api_port}) == 6
    async with httpx.AsyncClient(timeout=5) as client:
        for key, one in started.items():
            try:
                await _until_ready(client, one.port, timeout_s=60)
            except TimeoutError:
                readyz = await _readyz(client, one.port)
                pytest.fail(
                    f"{key} not ready on {one.port} ({readyz}):\n{one.log_path.read_text()}"
                )
        for name in names:
            status = await client.get(f"http://127.0.0.1:{started[name].port}/status")
            assert status.json()["dest"] == name
        token = (root / "etc/hifi/dashboard-token").read_text().strip()
        overview = await client.get(
            f"http://127.0.0.1:{started['retrier'].port}/api/overview",
            headers={"x-hifi-token": token},
        )
        assert overview.json()["can_act"] is True
        assert overview.json()["has_token"] is True
        posted = await client.post(
            f"http://127.0.0.1:{api_port}/v1/events/clicks", json={"id": unique}, headers=auth()
        )
        assert (posted.status_code, posted.json()["accepted"]) == (200, 1), posted.text
    for one in started.values():
        one.process.send_signal(signal.Signals[one.unit.value("KillSignal")])
    for key, one in started.items():
        code = await wait_exit(one.process, float(one.unit.value("TimeoutStopSec")))
        assert code == 0, f"{key}:\n{one.log_path.read_text()}"
    assert any((root / "var/lib/hifi/archive").iterdir())


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


def test_ingest_reads_its_streams_and_its_own_optional_env_file(tmp_path: Path) -> None:
    """ingest's environment: its streams directory, the shared file, then /etc/hifi/ingest.env
    when present (its port and its Kafka user win over the shared ones); without that file
    it starts on the shared settings and its default ports."""
    unit = read_units()["ingest.service"]
    assert unit.values("EnvironmentFile") == ["-/etc/hifi/env", "-/etc/hifi/ingest.env"]
    assert "LoadCredential" not in dict(unit.sections["Service"])  # its tokens are stored hashed
    etc = tmp_path / "etc" / "hifi"
    etc.mkdir(parents=True)
    (etc / "env").write_text("HIFI_KAFKA_BOOTSTRAP=k:9092\nHIFI_KAFKA_USERNAME=hifi\n")
    without = service_command(unit, "", tmp_path)
    assert without.argv == [f"{tmp_path}/opt/hifi/bin/ingest", "--log-format", "json"]
    assert METRICS_PORT_ENV not in without.env
    assert without.env["HIFI_STREAMS_DIR"] == f"{tmp_path}/etc/hifi/streams"
    (etc / "ingest.env").write_text(f"{METRICS_PORT_ENV}=9413\nHIFI_KAFKA_USERNAME=hifi-ingest\n")
    own = service_command(unit, "", tmp_path)
    assert (own.env[METRICS_PORT_ENV], own.env["HIFI_KAFKA_USERNAME"]) == ("9413", "hifi-ingest")
    assert own.env["HIFI_KAFKA_BOOTSTRAP"] == "k:9092"


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
    path, and is not restarted after exit 2 (bad configuration); only a daemon that keeps
    files has a state directory."""
    for key, value in HARDENING.items():
        assert unit.values(key) == [value], (unit.name, key)
    assert unit.value("User") == "hifi"
    assert unit.value("RestartPreventExitStatus") == "2"
    assert unit.value("Restart") == "on-failure"
    assert unit.value("ExecStart").startswith("/opt/hifi/bin/")
    assert unit.values("StateDirectory") == (["hifi"] if unit.name in STATEFUL else [])


def test_every_unit_has_the_same_sandbox() -> None:
    """The sandbox settings the connector unit has, every unit has, with the same values: a
    setting added to one unit and forgotten in another fails here."""
    units = read_units()
    sandbox_keys = [key for key, _ in units["connector@.service"].sections["Service"]]
    sandbox_keys = sandbox_keys[sandbox_keys.index("NoNewPrivileges") :]
    assert len(sandbox_keys) > len(HARDENING)
    for unit in units.values():
        found = [(key, unit.values(key)) for key in sandbox_keys]
        assert found == [(key, units["connector@.service"].values(key)) for key in sandbox_keys]
