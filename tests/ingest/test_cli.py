"""`ingest` as a process: a bad stream file is one line and exit 2; `hash-token`; `--check`; SIGTERM exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from config.streams import hash_token
from devstack.ports import free_port
from devstack.readiness import until_ready
from hifi.kafka import admin
from hifi.kafka.settings import KafkaSettings
from tests.helpers import start_daemon, wait_exit
from tests.ingest.support import TOKEN, auth, make_topic, streams_dir, write_stream

pytestmark = [pytest.mark.integration]


def _run(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ingest", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": "127.0.0.1:1", **env},
        check=False,
    )


def _last_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_bad_stream_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A typo'd key: `ingest: FILE: unknown key ...`, exit 2, before anything is reached."""
    write_stream(tmp_path, "clicks", topic="c", tokens_sha256=[hash_token("t")], max_evnts=3)
    run = _run("--streams", str(tmp_path), "--log-format", "json", env={})
    assert run.returncode == 2, run.stderr
    line = _last_line(run.stderr)
    assert line.startswith("ingest: ")
    assert "clicks.toml" in line
    assert "max_evnts" in line


def test_no_streams_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Without --streams or HIFI_STREAMS_DIR the command says how to name one."""
    env = {key: value for key, value in os.environ.items() if key != "HIFI_STREAMS_DIR"}
    run = subprocess.run(
        [sys.executable, "-m", "ingest"], capture_output=True, text=True, env=env, check=False
    )
    assert run.returncode == 2
    assert "HIFI_STREAMS_DIR" in _last_line(run.stderr)


def test_hash_token_prints_the_hash_to_store(tmp_path: Path) -> None:
    """`ingest hash-token` reads stdin (one trailing newline dropped); nothing on stdin is exit 2."""
    run = _run("hash-token", env={}, stdin="s3cret\n")
    assert (run.returncode, run.stdout) == (0, hash_token("s3cret") + "\n")
    empty = _run("hash-token", env={}, stdin="")
    assert empty.returncode == 2
    assert "no token on stdin" in _last_line(empty.stderr)


def test_check_lists_the_streams_without_their_hashes(tmp_path: Path) -> None:
    """`--check` validates and prints each stream, never a token's hash; exit 0."""
    directory = streams_dir(tmp_path, "clicks-topic")
    run = _run("--check", env={"HIFI_STREAMS_DIR": str(directory)})
    assert run.returncode == 0, run.stderr
    assert "stream clicks: topic clicks-topic" in run.stdout
    assert hash_token(TOKEN) not in run.stdout
    assert "accepted trail: streams clicks, other, facts to hifi.audit" in run.stdout
    assert run.stdout.splitlines()[-1] == "ingest check: ok"


async def test_sigterm_drains_and_exits_0(
    kafka_settings: KafkaSettings, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """The daemon serves, then on SIGTERM stops and exits 0; its log never holds the token."""
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path, topic)
    port, ops_port = free_port(), free_port()
    log = tmp_path / "ingest.log"
    args = ["--streams", str(directory), "--host", "127.0.0.1", "--port", str(port)]
    process = start_daemon(
        "ingest", [*args, "--metrics-port", str(ops_port)], log_path=log, kafka=kafka_settings
    )
    processes.append(process)
    assert await until_ready([ops_port], 60), log.read_text()
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"http://127.0.0.1:{port}/v1/events/clicks",
            content=b'{"id": "cli-1"}',
            headers={"content-type": "application/json", **auth()},
        )
        assert response.status_code == 200, response.text
        wrong = await client.post(
            f"http://127.0.0.1:{port}/v1/events/clicks",
            content=b"{}",
            headers={"content-type": "application/json", "authorization": "Bearer leaked-guess"},
        )
        assert wrong.status_code == 401
    process.send_signal(signal.SIGTERM)
    assert await wait_exit(process, 60) == 0, log.read_text()
    text = log.read_text()
    assert "ingest_stopped" in text
    assert TOKEN not in text
    assert "leaked-guess" not in text


async def test_probe_reaches_kafka_and_the_streams_topics(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """`--probe` says which stream topic is missing (a warning, exit 0), and exit 1 when Kafka is unreachable."""
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path, topic)
    write_stream(directory, "ghost", topic="no-such-topic", tokens_sha256=[hash_token("g")])
    env = {"HIFI_STREAMS_DIR": str(directory), "HIFI_KAFKA_BOOTSTRAP": kafka_settings.bootstrap}
    found = _run("--probe", env=env)
    assert found.returncode == 0, found.stderr
    assert f"source topic {topic}: exists" in found.stdout
    assert "source topic no-such-topic: does not exist" in found.stdout
    assert "topic hifi.audit" in found.stdout  # the accepted trail's topic, and its retention
    unreachable = _run("--probe", env={"HIFI_STREAMS_DIR": str(directory)})
    assert unreachable.returncode == 1
    assert unreachable.stdout.splitlines()[-1] == "ingest check: unreachable"


async def test_probe_warns_of_an_audit_topic_that_keeps_facts_too_briefly(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """The accepted trail's topic deleting facts within an hour: a warning (the auditor may read
    them too late); a missing one will be created with the retention hifi needs."""
    topic = await make_topic(kafka_settings)
    short = "audit-" + uuid.uuid4().hex[:10]
    await admin.ensure_topics(kafka_settings, [short], partitions=1, retention_ms=3_600_000)
    env = {
        "HIFI_STREAMS_DIR": str(streams_dir(tmp_path, topic)),
        "HIFI_KAFKA_BOOTSTRAP": kafka_settings.bootstrap,
    }
    found = _run("--probe", env={**env, "HIFI_AUDIT_TOPIC": short})
    assert found.returncode == 0, found.stderr
    assert f"topic {short}: retention.ms=3600000 (1 h) is shorter than" in found.stdout
    missing = _run("--probe", env={**env, "HIFI_AUDIT_TOPIC": short + "-new"})
    assert f"topic {short}-new: will be created with retention 7 d" in missing.stdout
