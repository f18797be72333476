"""Builders shared by the secured-Kafka tests: a TLS listener per module, `--check --probe` runs
with given Kafka settings, and the line a refused set-up prints."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from devstack.tls import TlsKafka, stunnel_missing
from hifi.kafka.settings import ENV_KEYS, KafkaSettings
from tests.helpers import write_destination

SASL_PASSWORD = "sasl-Pa55-never-shown"
KEY_PASSWORD = "key-Pa55-never-shown"


def started_tls(tmp_path_factory: pytest.TempPathFactory, **options: object) -> Iterator[TlsKafka]:
    """A started `TlsKafka` (skipped, naming `make stunnel`, where stunnel is missing)."""
    why = stunnel_missing()
    if why is not None:
        pytest.skip(why)
    with TlsKafka(tmp_path_factory.mktemp("tls"), **options) as tls:  # type: ignore[arg-type]
        yield tls


def other_ca_file(directory: Path) -> str:
    """The certificate of a CA that signed nothing the broker presents."""
    path = directory / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return str(path)


def environment(settings: KafkaSettings) -> dict[str, str]:
    """This process's environment with `settings` in place of every `HIFI_KAFKA_*` variable."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS.values()}
    return {**env, **settings.environment()}


async def run_cli(prog: str, *args: str, settings: KafkaSettings) -> tuple[int, str, str]:
    """`python -m PROG ARGS` connecting with `settings`: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        prog,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=environment(settings),
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def probe(catalog_dir: Path, name: str, url: str, settings: KafkaSettings) -> tuple[int, str]:
    """`connector --dest NAME --check --probe` with `settings`: its exit code and the one line
    it prints about Kafka, after asserting that no secret and no traceback was printed."""
    write_destination(catalog_dir, name, url=url, source_topics=[name])
    code, out, err = await run_cli(
        "connector", "--dest", name, "--catalog", str(catalog_dir), "--check", "--probe",
        settings=settings,
    )  # fmt: skip
    printed = out + err
    assert "Traceback" not in printed, printed
    for secret in (SASL_PASSWORD, KEY_PASSWORD):
        assert secret not in printed
    kafka_lines = [line for line in out.splitlines() if f" kafka {settings.bootstrap}:" in line]
    assert len(kafka_lines) == 1, out
    return code, kafka_lines[0]
