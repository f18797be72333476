"""Bad input at the process boundary: one line naming what and where, exit 2 for configuration, 1 at run time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import write_destination


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **env},
        check=False,
    )


def _one_line(result: subprocess.CompletedProcess[str], prog: str) -> str:
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"{prog}: ")
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "soon"])
@pytest.mark.parametrize("prog", ["connector", "retrier"])
@pytest.mark.integration
def test_until_idle_takes_only_a_finite_positive_number(prog: str, value: str) -> None:
    """`--until-idle inf` (or nan, negative, zero, text) is refused in one line with exit 2."""
    result = _run(prog, "--dest", "x", "--until-idle", value)
    assert result.returncode == 2
    assert "--until-idle" in _one_line(result, prog)


@pytest.mark.parametrize("prog", ["connector", "retrier"])
@pytest.mark.integration
def test_unknown_log_level_is_refused_with_the_allowed_list(prog: str) -> None:
    """An unknown `--log-level` names the levels that are allowed."""
    result = _run(prog, "--dest", "x", "--log-level", "LOUD")
    assert result.returncode == 2
    line = _one_line(result, prog)
    assert all(level in line for level in ("debug", "info", "warning", "error"))


@pytest.mark.integration
def test_version_on_every_command() -> None:
    """`--version` prints the command and hifi's version, and exits 0."""
    for prog in ("connector", "retrier"):
        result = _run(prog, "--version")
        assert result.returncode == 0
        assert result.stdout.startswith(f"{prog} ")


@pytest.mark.integration
def test_kafka_ca_file_that_is_no_certificate(catalog_dir: Path, tmp_path: Path) -> None:
    """HIFI_KAFKA_CA_FILE pointing at something that is not a PEM certificate: one line, exit 2."""
    write_destination(catalog_dir, "d", url="https://x.test/", source_topics=["e"])
    bogus = tmp_path / "ca.pem"
    bogus.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    result = _run(
        "connector",
        "--dest",
        "d",
        "--catalog",
        str(catalog_dir),
        HIFI_KAFKA_SECURITY_PROTOCOL="SSL",
        HIFI_KAFKA_CA_FILE=str(bogus),
    )
    assert result.returncode == 2
    line = _one_line(result, "connector")
    assert "HIFI_KAFKA_CA_FILE" in line
    assert "not a PEM CA certificate bundle" in line


@contextlib.asynccontextmanager
async def _silent_listener() -> AsyncIterator[int]:
    """A TCP port that accepts connections and never says a word."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in held:
            writer.close()


@pytest.mark.slow
@pytest.mark.integration
async def test_a_bootstrap_that_never_answers_kafka_is_waited_for_with_the_cause_named(
    catalog_dir: Path,
) -> None:
    """A bootstrap that accepts connections but never answers: the daemon waits for it. The
    start line names what is tried; within 15 s (plus the probe) a `kafka_waiting` line gives
    the cause, `/readyz` answers 503 naming it, and a stop request ends it with exit 0."""
    write_destination(catalog_dir, "d", url="https://x.test/", source_topics=["e"])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        ops_port = probe.getsockname()[1]
    async with _silent_listener() as port:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "connector",
            "--dest",
            "d",
            "--catalog",
            str(catalog_dir),
            "--metrics-port",
            str(ops_port),
            "--log-format",
            "json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}"},
        )
        assert process.stderr is not None
        lines: list[str] = []
        async with asyncio.timeout(45):
            while not any('"kafka_waiting"' in line for line in lines):
                lines.append((await process.stderr.readline()).decode())
        async with httpx.AsyncClient() as client:
            ready = await client.get(f"http://127.0.0.1:{ops_port}/readyz")
        process.terminate()
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0
    assert any('"kafka_connecting"' in line and f"127.0.0.1:{port}" in line for line in lines)
    waiting = lines[-1]
    assert "no Kafka answer within 15 s" in waiting
    assert "accepts connections but does not answer a Kafka request" in waiting
    assert ready.status_code == 503
    assert "kafka: waiting: connect" in ready.text
    assert "Traceback" not in "".join(lines) + err.decode()
