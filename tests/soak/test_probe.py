"""The broker alone (`soak.probe`): a process of its own reading the source topics from their
ends, each record's lag from its producer's timestamp cut by that timestamp's minute, written
out on SIGTERM. Against the session's broker."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
import time
from pathlib import Path

import pytest

from chaos.audit import MINUTE_MS, minute_of
from hifi.errors import BrokerUnavailable
from hifi.kafka import admin
from hifi.kafka.clients import Record
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings
from soak import probe

pytestmark = pytest.mark.integration

_STARTED_TIMEOUT_S = 60.0
_BEHIND_MS = 3_000  # the records' timestamps, behind the clock


async def _produce(
    settings: KafkaSettings, topic: str, count: int, timestamp_ms: int, *, partition: int = 0
) -> None:
    records: list[Record] = [(topic, None, f"{n}".encode(), []) for n in range(count)]
    async with open_producer(settings) as producer:
        await producer.send_all(records, partition=partition, timestamps_ms=[timestamp_ms] * count)


@pytest.mark.timeout(120)
async def test_the_probe_times_each_record_from_its_timestamp_by_its_minute(
    tmp_path: Path, kafka_settings: KafkaSettings
) -> None:
    topics = [f"probe.{secrets.token_hex(3)}", f"probe.{secrets.token_hex(3)}"]
    await admin.ensure_topics(kafka_settings, topics, partitions=2)
    before_ms = minute_of(time.time_ns() // 1_000_000) - 10 * MINUTE_MS
    await _produce(kafka_settings, topics[0], 20, before_ms)  # before the probe: not read
    out = tmp_path / "probe.json"
    command = [sys.executable, "-m", "soak.probe", "--out", str(out), "--fetch-max-wait-ms", "50"]
    command += ["--partitions-per-topic", "1"]  # a sample: partition 0 of each
    process = await asyncio.create_subprocess_exec(
        *command,
        *(arg for topic in topics for arg in ("--topic", topic)),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **kafka_settings.environment()},
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), _STARTED_TIMEOUT_S)
    assert line.startswith(b"probe: reading 2 partitions"), line
    written_ms = time.time_ns() // 1_000_000 - _BEHIND_MS
    await _produce(kafka_settings, topics[0], 30, written_ms)
    await _produce(kafka_settings, topics[0], 7, written_ms, partition=1)  # not in the sample
    await _produce(kafka_settings, topics[1], 10, written_ms)
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), 30.0) == 0

    minutes = probe.load(out)
    assert minute_of(before_ms) not in minutes  # read from the ends
    lags = minutes[minute_of(written_ms)]
    assert lags.events == 40  # partition 0 of both topics
    assert lags.p50_ms is not None
    assert lags.p99_ms is not None
    assert _BEHIND_MS <= lags.p50_ms <= lags.p99_ms < _BEHIND_MS + 30_000


@pytest.mark.timeout(60)
async def test_a_probe_of_topics_that_do_not_exist_says_so(
    tmp_path: Path, kafka_settings: KafkaSettings
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "soak.probe",
        "--out",
        str(tmp_path / "probe.json"),
        "--topic",
        f"probe.absent.{secrets.token_hex(3)}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **kafka_settings.environment()},
    )
    _, err = await asyncio.wait_for(process.communicate(), 50.0)
    assert process.returncode == 1
    assert b"Error: no partitions found for probe.absent." in err
    assert not (tmp_path / "probe.json").exists()


class _Unanswered:
    """A consumer whose broker does not answer: each poll raises as a frozen broker's does."""

    polls = 0

    async def getmany(self, *, timeout_ms: int) -> dict[object, list[object]]:
        self.polls += 1
        raise BrokerUnavailable("kafka 127.0.0.1:9: fetch: timed out")


async def test_a_broker_that_does_not_answer_is_waited_for_not_a_crash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    consumer = _Unanswered()
    assert await probe.fetch(consumer) == {}  # type: ignore[arg-type]
    assert consumer.polls == 1
    assert "probe: kafka 127.0.0.1:9: fetch: timed out" in capsys.readouterr().out
