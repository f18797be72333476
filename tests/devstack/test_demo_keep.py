"""`make demo KEEP=1`: the flag, the hints it prints, that they can be pasted, and Ctrl-C safety.

The demo itself (20,000 events, about 30 s) is not run here; the parts `--keep` adds are.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devstack import demo
from devstack.broker import LocalBroker, metadata_answers
from devstack.destination import TestDestination
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_keep_is_off_unless_asked() -> None:
    assert demo.parse_args([]).keep is False
    assert demo.parse_args([]).produce is None
    assert demo.parse_args(["--keep"]).keep is True
    assert demo.parse_args(["--produce", "250"]).produce == 250


@pytest.mark.parametrize("argv", [["--produce", "0"], ["--produce", "5", "--keep"], ["--kep"]])
def test_bad_demo_flags_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        demo.parse_args(argv)
    assert exited.value.code == 2


@pytest.mark.integration
def test_makefile_passes_keep_only_when_set() -> None:
    """`make demo` runs the demo as before; KEEP=1 adds --keep, KEEP=0 does not."""

    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")

    def command(*assignments: str) -> str:
        dry = subprocess.run(  # -o: never rebuild the virtualenv, -n: only print the command
            [make, "-s", "-n", "-o", ".venv/.installed", "demo", *assignments],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        return dry.stdout.strip().splitlines()[-1]

    assert command().split() == [".venv/bin/python", "-m", "devstack.demo"]
    assert command("KEEP=0").split() == [".venv/bin/python", "-m", "devstack.demo"]
    assert command("KEEP=1").split() == [".venv/bin/python", "-m", "devstack.demo", "--keep"]


def test_hints_carry_the_real_addresses(tmp_path: Path) -> None:
    running = demo.Running(
        bootstrap="127.0.0.1:19092",
        destination_url="http://127.0.0.1:18080/v1/events",
        connector_port=19400,
        retrier_port=19401,
        auditor_port=19402,
        work_dir=tmp_path / ".demo",
        bin_dir=Path(".venv/bin"),
    )
    hints = demo.keep_hints(running)
    for url in (
        "http://127.0.0.1:19400/metrics",
        "http://127.0.0.1:19400/status",
        "http://127.0.0.1:19401/status",
        "http://127.0.0.1:19401/metrics",
        "http://127.0.0.1:19401/readyz",
        "http://127.0.0.1:18080/v1/events",
    ):
        assert url in hints
    assert ".venv/bin/auditor report --dest demo --url http://127.0.0.1:19402" in hints
    env = f"HIFI_KAFKA_BOOTSTRAP=127.0.0.1:19092 HIFI_CATALOG_DIR={tmp_path}/.demo/catalog"
    assert f"{env} .venv/bin/retrier dlq list --dest demo" in hints
    assert (
        "HIFI_KAFKA_BOOTSTRAP=127.0.0.1:19092 .venv/bin/python -m devstack.demo --produce" in hints
    )
    for log in ("connector.log", "retrier.log", "auditor.log", "tansu.log"):
        assert str(tmp_path / ".demo" / log) in hints
    assert "Ctrl-C" in hints
    dashboard = next(line for line in hints.splitlines() if "dashboard" in line)
    assert "http://127.0.0.1:19401/" in dashboard
    assert str(tmp_path / ".demo" / "dashboard-token") in dashboard


def test_the_dashboard_token_is_a_file_only_its_owner_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    demo.WORK_DIR.mkdir()
    path = demo.dashboard_token_file()
    token = path.read_text().strip()
    assert len(token) >= 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert demo.dashboard_token_file().read_text().strip() != token  # fresh for every demo


def _command(hints: str, label: str) -> list[str]:
    """The shell words of the hint line that starts with `label`."""
    line = next(line for line in hints.splitlines() if line.strip().startswith(label))
    return shlex.split(line.strip()[len(label) :])


def _run_pasted(words: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `VAR=value ... program args` as a shell would, from the repository root."""
    assignments = {}
    while "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        assignments[name] = value
    return subprocess.run(
        words,
        cwd=REPO_ROOT,
        env={**os.environ, **assignments},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.integration
async def test_pasted_hints_list_dead_letters_and_produce_more(
    kafka_settings: KafkaSettings, destination: TestDestination, tmp_path: Path
) -> None:
    """The `dead letters` and `more events` lines work as printed against a broker."""
    work_dir = tmp_path / ".demo"
    (work_dir / "catalog").mkdir(parents=True)
    (work_dir / "catalog" / f"{demo.DEST}.toml").write_text(demo.catalog_text(destination.url))
    running = demo.Running(
        kafka_settings.bootstrap, destination.url, 1, 2, 3, work_dir, Path(sys.executable).parent
    )
    hints = demo.keep_hints(running)

    listed = _run_pasted(_command(hints, "dead letters"))
    assert listed.returncode == 0, listed.stderr

    # As in the demo, the topic exists (and `read_topic` of a missing topic trips an aiokafka
    # race: its consumer's close() re-raises the cancellation of a task that never started).
    await kafka_admin.ensure_topics(kafka_settings, [demo.TOPIC], partitions=4)
    before = len(await read_topic(kafka_settings, demo.TOPIC))
    produced = _run_pasted([*_command(hints, "more events")[:-1], "30"])
    assert produced.returncode == 0, produced.stderr
    assert "produced 30 events" in produced.stdout
    assert len(await read_topic(kafka_settings, demo.TOPIC)) == before + 30


@pytest.mark.integration
def test_ctrl_c_does_not_reach_children_started_shielded() -> None:
    """Tansu dies on SIGINT; started inside `shielded_from_ctrl_c` it ignores it (not SIGTERM)."""
    with demo.shielded_from_ctrl_c(True):
        shielded = LocalBroker().start()
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    exposed = LocalBroker().start()
    try:
        for broker in (shielded, exposed):
            assert broker._process is not None
            os.kill(broker._process.pid, signal.SIGINT)
        assert exposed._process is not None
        exposed._process.wait(timeout=30)  # the exposed one dies of the signal ...
        assert shielded._process is not None
        assert shielded._process.poll() is None  # ... the shielded one is still there
        assert metadata_answers(shielded.host, shielded.port)
        assert not metadata_answers(exposed.host, exposed.port)
    finally:
        shielded.stop()
        exposed.stop()
