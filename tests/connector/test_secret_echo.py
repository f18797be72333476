"""A destination that echoes its credentials: the token never gets into what hifi writes.

The connector and the retrier run as processes, with `TOKEN` in their environment and
`Authorization = "Bearer ${TOKEN}"` in the catalog, against a destination that echoes the token
in its error bodies, a `WWW-Authenticate` header and a redirect's `Location`. What a person can
read afterwards is checked for any 8 consecutive characters of the token, plain or escaped: the
connector's log (JSON and console, INFO and DEBUG), the retrier's log, the headers of hand-offs
and dead letters (`hifi-error`, `hifi-history`), the retrier's `/status` and `retrier dlq list`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from devstack.destination import Echo, Reply, TestDestination
from devstack.kafka_tools import produce_events
from hifi.headers import header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from tests.helpers import all_headers, events, leaks, make_destination, wait_exit
from tests.retrier.support import run_retrier_command

pytestmark = [pytest.mark.integration]

MASK = "***"
LOG_MODES = [("json", "INFO"), ("console", "DEBUG")]


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    """An opaque 40-character token with a `/` and a `+`, in $TOKEN for this test and its children."""
    raw = secrets.token_urlsafe(30)
    value = f"{raw[:13]}/{raw[14:27]}+{raw[28:40]}"
    assert len(value) == 40
    monkeypatch.setenv("TOKEN", value)
    return value


def start(
    module: str,
    args: list[str],
    *,
    bootstrap: str,
    log_path: Path,
    log_format: str = "json",
    log_level: str = "INFO",
) -> subprocess.Popen[bytes]:
    """`python -m MODULE ARGS` with the test's environment (and $TOKEN), logging to `log_path`."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                module,
                *args,
                "--log-format",
                log_format,
                "--log-level",
                log_level,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": bootstrap},
        )


def read(path: Path) -> str:
    return path.read_text()


def retrier_args(dest: str, catalog_dir: Path) -> list[str]:
    """A retrier of `dest` in a group of its own: no member another test left in the default
    group (killed mid-join, say) holds up its join."""
    return ["--dest", dest, "--catalog", str(catalog_dir), "--group", f"{dest}.retrier"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def status_with_failures(
    port: int, dest: str, log_path: Path, timeout_s: float = 60.0
) -> str:
    """The retrier's /status body once it lists a recent failure of `dest`; on a timeout, the
    assertion shows the retrier's log."""
    try:
        async with httpx.AsyncClient() as client, asyncio.timeout(timeout_s):
            while True:
                try:
                    response = await client.get(f"http://127.0.0.1:{port}/status")
                    entry = response.json()["destinations"][dest]
                    if entry["recent_failures"]:
                        return response.text
                except (httpx.TransportError, ValueError, KeyError):
                    pass
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(
            f"no recent failure on /status; the retrier's log:\n{read(log_path)}"
        ) from None


async def dlq_list(settings: KafkaSettings, dest: str, catalog_dir: Path) -> tuple[str, str]:
    code, out, err = await run_retrier_command(
        "dlq", "list", "--dest", dest, "--catalog", str(catalog_dir), bootstrap=settings.bootstrap
    )
    assert code == 0, err
    return out, err


async def run_connector_until_idle(
    settings: KafkaSettings,
    dest: str,
    catalog_dir: Path,
    log_path: Path,
    processes: list[subprocess.Popen[bytes]],
    **log: str,
) -> str:
    args = ["--dest", dest, "--catalog", str(catalog_dir), "--metrics-port", "0"]
    process = start(
        "connector",
        [*args, "--until-idle", "1.5"],
        bootstrap=settings.bootstrap,
        log_path=log_path,
        **log,
    )
    processes.append(process)
    assert await wait_exit(process, 120) == 0, read(log_path)
    return read(log_path)


@pytest.mark.parametrize(("log_format", "log_level"), LOG_MODES)
async def test_rejection_echoing_the_bare_token_is_dead_lettered_masked(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    token: str,
    log_format: str,
    log_level: str,
) -> None:
    """400 with the bare token in the body and WWW-Authenticate: dead-lettered, token masked."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    destination.set_faults(1.0, [Reply(400)])
    destination.echo(Echo(token_only=True))
    make_destination(
        catalog_dir, unique, destination.url, unique, headers={"Authorization": "Bearer ${TOKEN}"}
    )
    await produce_events(kafka_settings, unique, events(1))
    log = await run_connector_until_idle(
        kafka_settings,
        unique,
        catalog_dir,
        tmp_path / "connector.log",
        processes,
        log_format=log_format,
        log_level=log_level,
    )

    (letter,) = await read_topic(kafka_settings, f"{unique}.dlq", at_least=1)
    out, err = await dlq_list(kafka_settings, unique, catalog_dir)

    assert destination.requests[0].headers["authorization"] == f"Bearer {token}"
    assert leaks(token, all_headers(letter), out, err, log) == []
    headers = header_map(letter.headers)
    assert headers["hifi-reason"] == b"http_4xx"
    assert (
        headers["hifi-error"]
        == b'HTTP 400 Bad Request: {"error":"400: injected fault","echo":"***"}'
    )
    assert orjson.loads(headers["hifi-history"])[0]["error"] == headers["hifi-error"].decode()
    assert out.startswith("http_4xx status=400 error=\"HTTP 400 Bad Request: {'error':")
    assert "'echo':'***'}" in out
    assert "dead_lettered" in log
    assert '"echo":"***"' in log.replace('\\"', '"')  # JSON lines escape the quotes


@pytest.mark.parametrize(("log_format", "log_level"), LOG_MODES)
async def test_unavailable_echoing_the_header_is_handed_off_masked(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    token: str,
    log_format: str,
    log_level: str,
) -> None:
    """503 echoing `Bearer TOKEN` (with `\\/` in JSON): hand-off, retrier's /status, logs masked."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    destination.set_faults(1.0, [Reply(503)])
    destination.echo(Echo())
    make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        headers={"Authorization": "Bearer ${TOKEN}"},
        local_retry_attempts=2,
        retry_tiers_s=[600],
    )
    await produce_events(kafka_settings, unique, events(1))
    log = await run_connector_until_idle(
        kafka_settings,
        unique,
        catalog_dir,
        tmp_path / "connector.log",
        processes,
        log_format=log_format,
        log_level=log_level,
    )
    (handoff,) = await read_topic(kafka_settings, f"{unique}.retry_in", at_least=1)
    port = free_port()
    retrier = start(
        "retrier",
        [*retrier_args(unique, catalog_dir), "--metrics-port", str(port)],
        bootstrap=kafka_settings.bootstrap,
        log_path=tmp_path / "retrier.log",
        log_format=log_format,
        log_level=log_level,
    )
    processes.append(retrier)
    try:
        status = await status_with_failures(port, unique, tmp_path / "retrier.log")
    finally:
        retrier.send_signal(signal.SIGTERM)
        assert await wait_exit(retrier, 60) == 0
    retrier_log = read(tmp_path / "retrier.log")

    assert leaks(token, all_headers(handoff), status, log, retrier_log) == []
    error = 'HTTP 503 Service Unavailable: {"error":"503: injected fault","echo":"***"}'
    headers = header_map(handoff.headers)
    assert headers["hifi-error"] == error.encode()
    assert [entry["error"] for entry in orjson.loads(headers["hifi-history"])] == [error]
    failure = orjson.loads(status)["destinations"][unique]["recent_failures"][0]
    assert (failure["status"], failure["error"]) == ("503", error)
    assert "handed_off" in log
    assert "destination_failing" in log
    assert '"echo":"***"' in log.replace('\\"', '"')  # JSON lines escape the quotes


async def test_redirect_to_a_location_with_the_token_is_handed_off_masked(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    token: str,
) -> None:
    """302 to /login?token=TOKEN (percent-encoded): the redirect's hand-off shows `***`."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    destination.set_faults(1.0, [Reply(302)])
    destination.echo(Echo(token_only=True))
    make_destination(
        catalog_dir, unique, destination.url, unique, headers={"Authorization": "Bearer ${TOKEN}"}
    )
    await produce_events(kafka_settings, unique, events(1))
    log = await run_connector_until_idle(
        kafka_settings, unique, catalog_dir, tmp_path / "connector.log", processes
    )
    (handed,) = await read_topic(kafka_settings, f"{unique}.retry_in", at_least=1)

    assert leaks(token, all_headers(handed), log) == []
    headers = header_map(handed.headers)
    assert headers["hifi-cause"] == b"redirect"
    assert headers["hifi-error"].startswith(b"HTTP 302 redirect to /login?token=***:")
    assert "/login?token=***:" in log


async def test_token_split_across_two_failures_is_masked_in_each(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    token: str,
) -> None:
    """The first error body ends with the token's first half, the next one starts with the rest.

    Each failure is an entry of `hifi-history`, stored apart: each half must be masked on its
    own, so that the entries cannot be put back together into the token.
    """
    head, tail = token[:20], token[20:]
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    destination.script(Reply(503), Reply(400))
    destination.echo(Echo(text=f"credentials rejected near {head}", raw_body=True))
    make_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        headers={"Authorization": "Bearer ${TOKEN}"},
        local_retry_attempts=1,
        retry_tiers_s=[1],
    )
    await produce_events(kafka_settings, unique, events(1))
    args = ["--dest", unique, "--catalog", str(catalog_dir)]
    bootstrap = kafka_settings.bootstrap
    connector = start(
        "connector",
        [*args, "--metrics-port", "0"],
        bootstrap=bootstrap,
        log_path=tmp_path / "connector.log",
    )
    port = free_port()
    retrier = start(
        "retrier",
        [*retrier_args(unique, catalog_dir), "--metrics-port", str(port)],
        bootstrap=bootstrap,
        log_path=tmp_path / "retrier.log",
    )
    processes.extend([connector, retrier])
    try:
        assert await destination.wait_for_requests(1, 60)
        destination.echo(Echo(text=f"{tail} is not a valid credential", raw_body=True))
        status = await status_with_failures(port, unique, tmp_path / "retrier.log")
        (letter,) = await read_topic(kafka_settings, f"{unique}.dlq", at_least=1)
    finally:
        for process in (connector, retrier):
            process.send_signal(signal.SIGTERM)
        for process in (connector, retrier):
            assert await wait_exit(process, 60) == 0
    (handoff,) = await read_topic(kafka_settings, f"{unique}.retry_in", at_least=1)
    out, err = await dlq_list(kafka_settings, unique, catalog_dir)
    logs = [read(tmp_path / name) for name in ("connector.log", "retrier.log")]
    history = orjson.loads(header_map(letter.headers)["hifi-history"])
    # What a reader would put back together: the end of the first entry, the start of the next.
    rejoined = history[0]["error"].rsplit(" ", 1)[-1] + history[1]["error"].split(": ")[1][:20]

    assert [r.status for r in destination.requests] == [503, 400]
    texts = [rejoined, all_headers(letter), all_headers(handoff), status, out, err, *logs]
    assert leaks(token, *texts) == []
    assert [entry["error"] for entry in history] == [
        "HTTP 503 Service Unavailable: credentials rejected near ***",
        "HTTP 400 Bad Request: *** is not a valid credential",
    ]
    assert 'error="HTTP 400 Bad Request: *** is not a valid credential"' in out
    assert "credentials rejected near ***" in status
