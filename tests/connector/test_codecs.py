"""Batches compressed by librdkafka (the client under most non-Java producers) reach the destination.

librdkafka (through `confluent_kafka`) writes each codec against the test broker; the
connector must read all of them: none and gzip with the standard library, snappy, lz4 and
zstd with `cramjam` (aiokafka's codec extras).

Tansu 0.6.0, the test broker, stores every codec: it keeps the producer's record batches as
they are and hands them back on fetch still compressed (checked below by switching off
aiokafka's check for each codec, which then fails naming it). librdkafka needs no special
settings for Tansu: its default `api.version.request=true` negotiates the versions Tansu
advertises, and no `broker.version.fallback` is needed.

When a codec library is missing, the connector must stop with one line naming the codec and
exit 1, never with a traceback: the connector runs as a process whose `import cramjam` fails
(a `sitecustomize` on PYTHONPATH), as on a host installed without the extras.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import aiokafka.codec
import confluent_kafka
import orjson
import pytest

from config.catalog import Catalog
from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import committed_offsets
from hifi.errors import BrokerRefused
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from tests.helpers import events, make_destination, start_daemon, wait_exit, write_destination

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
COMPRESSED = ["gzip", "snappy", "lz4", "zstd"]

# Put on PYTHONPATH, this makes every `import cramjam` fail, as on a host without the codec
# extras: aiokafka then reports snappy, lz4 and zstd as unavailable.
_BLOCK_CRAMJAM = """
import sys


class _BlockCramjam:
    def find_spec(self, name, path=None, target=None):
        if name == "cramjam" or name.startswith("cramjam."):
            raise ImportError(f"{name} is blocked by the test")
        return None


sys.meta_path.insert(0, _BlockCramjam())
"""


def _produce_with_librdkafka(
    bootstrap: str, topic: str, sent: list[dict[str, Any]], codec: str
) -> None:
    """Produce `sent` keyed by id as librdkafka batches compressed with `codec`; raise on any failure."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 50,
            "batch.num.messages": 1000,
            "acks": "all",
        }
    )
    failures: list[str] = []

    def on_delivery(error: confluent_kafka.KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    for event in sent:
        producer.produce(
            topic, value=orjson.dumps(event), key=str(event["id"]).encode(), on_delivery=on_delivery
        )
    unsent = producer.flush(30)
    assert unsent == 0, f"librdkafka could not deliver {unsent} records with {codec}"
    assert failures == [], f"librdkafka produce with {codec} failed: {failures[:3]}"


async def test_connector_delivers_librdkafka_batches_of_every_codec_once(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """Every event of batches librdkafka compressed with each codec is delivered exactly once.

    One topic per codec, all sources of one destination, so one connector run (and one group
    join, which takes Tansu about 5 s) covers every codec.
    """
    topics = {codec: f"{unique}.{codec}" for codec in CODECS}
    await kafka_admin.ensure_topics(kafka_settings, topics.values(), partitions=3)
    sent = {codec: events(1000, prefix=codec) for codec in CODECS}
    for codec, topic in topics.items():
        await asyncio.to_thread(
            _produce_with_librdkafka, kafka_settings.bootstrap, topic, sent[codec], codec
        )
    write_destination(
        catalog_dir,
        unique,
        url=destination.url,
        source_topics=list(topics.values()),
        max_batch_records=200,
        commit_interval_s=0.2,
        internal_topic_partitions=2,
    )
    dest = Catalog(catalog_dir).load(unique)
    await asyncio.wait_for(Connector(dest, kafka_settings, until_idle_s=2).run(), 60)
    delivered = destination.delivered_ids()
    assert len(delivered) == len(set(delivered)), "duplicates"
    for codec, topic in topics.items():
        expected = {e["id"] for e in sent[codec]}
        got = [i for i in delivered if i.startswith(f"{codec}-")]
        assert sorted(got) == sorted(expected), f"{codec}: {len(got)} of {len(expected)} delivered"
        committed = await committed_offsets(kafka_settings, dest.connector_group, topic)
        assert sum(offset or 0 for offset in committed.values()) == len(expected), codec


@pytest.mark.parametrize("codec", COMPRESSED)
async def test_librdkafka_batches_stay_compressed_on_tansu(
    kafka_settings: KafkaSettings, unique: str, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    """The broker hands back `codec` batches as librdkafka wrote them, not decompressed.

    Reading them with aiokafka's check for that codec switched off must fail naming it, so
    the delivery test above really reads compressed batches.
    """
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    sent = events(200, prefix=codec)
    await asyncio.to_thread(_produce_with_librdkafka, kafka_settings.bootstrap, unique, sent, codec)
    monkeypatch.setattr(aiokafka.codec, f"has_{codec}", lambda: False)
    with pytest.raises(BrokerRefused, match=f"{codec} compression codec not found"):
        await read_topic(kafka_settings, unique, timeout_s=20)
    monkeypatch.undo()
    assert len(await read_topic(kafka_settings, unique, timeout_s=20)) == len(sent)


@pytest.mark.slow
async def test_missing_codec_library_is_one_line_and_exit_1(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without cramjam, a zstd batch stops the connector with one line naming the codec, exit 1."""
    codec = "zstd"
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_BLOCK_CRAMJAM)
    inherited = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(blocker), *([inherited] if inherited else [])])
    )
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    sent = events(50, prefix=codec)
    await asyncio.to_thread(_produce_with_librdkafka, kafka_settings.bootstrap, unique, sent, codec)
    make_destination(catalog_dir, unique, destination.url, unique)
    log_path = tmp_path / "connector.log"
    process = start_daemon(
        "connector",
        ["--dest", unique, "--catalog", str(catalog_dir), "--metrics-port", "0"],
        bootstrap=kafka_settings.bootstrap,
        log_path=log_path,
    )
    try:
        code = await wait_exit(process, 60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    output = log_path.read_text()
    assert "Traceback" not in output, output
    assert code == 1, output
    final = [line for line in output.splitlines() if line.startswith("connector: ")]
    assert len(final) == 1, output
    assert f"{codec} compression codec" in final[0], output
    assert destination.delivered_ids() == []
