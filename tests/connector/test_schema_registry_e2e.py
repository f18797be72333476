"""Records written by confluent-kafka's Avro and JSON Schema serializers, through a real connector
process with `[decode]` and the devstack registry: delivered as the JSON their producer meant and
counted so by the auditor; an unknown schema id dead-lettered `undecodable` with the bytes as
written; a registry outage pausing intake with nothing dead-lettered."""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import AsyncSchemaRegistryClient
from confluent_kafka.schema_registry.avro import AsyncAvroSerializer
from confluent_kafka.schema_registry.json_schema import AsyncJSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from auditor.daemon import Auditor
from config.catalog import Catalog
from devstack.destination import TestDestination
from devstack.kafka_tools import read_topic
from devstack.schema_registry import serving
from hifi.headers import header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings
from tests.auditor.support import running, settled
from tests.helpers import start_daemon, until

pytestmark = [pytest.mark.integration]

AVRO = orjson.dumps(
    {
        "type": "record",
        "name": "Play",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "title", "type": ["null", "string"], "default": None},
            {"name": "blob", "type": "bytes"},
        ],
    }
).decode()
JSON_SCHEMA = orjson.dumps(
    {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
).decode()
V2 = AVRO.replace('"Play"', '"PlayV2"')


async def _encode(url: str, topic: str, schema: str, kind: str, values: list[Any]) -> list[bytes]:
    context = SerializationContext(topic, MessageField.VALUE)
    async with AsyncSchemaRegistryClient({"url": url}) as client:
        if kind == "avro":
            serializer = await AsyncAvroSerializer(client, schema)
        else:
            serializer = await AsyncJSONSerializer(schema, client)
        return [await serializer(value, context) for value in values]


async def _produce(settings: KafkaSettings, topic: str, values: list[bytes]) -> None:
    async with open_producer(settings) as producer:
        await producer.send_all([(topic, None, value, []) for value in values])


async def test_decoded_delivered_counted_and_an_outage_waited_out(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit_topic = f"{unique}.audit"
    monkeypatch.setenv("HIFI_AUDIT_TOPIC", audit_topic)  # the connector process's
    now = datetime.datetime.now(tz=datetime.UTC).replace(microsecond=0)
    now_ms = int(now.timestamp() * 1000)
    plays = [
        {"id": f"p-{i}", "event_time": now, "title": None if i % 2 else f"t{i}", "blob": b"\x01"}
        for i in range(20)
    ]
    documents = [{"id": f"j-{i}", "extra": [i]} for i in range(10)]
    async with serving() as registry:
        (catalog_dir / f"{unique}.toml").write_text(
            f'url = "{destination.url}"\nsource_topics = ["{unique}"]\n'
            "internal_topic_partitions = 1\ncommit_interval_s = 0.2\nlocal_retry_attempts = 1\n"
            f'[decode]\nkind = "schema_registry"\nurl = "{registry.url}"\ntimeout_s = 2\n'
            "[accounting]\nsettle_s = 1.0\nretention_min = 30\nlag_sla_s = 30.0\n"
        )
        dest = Catalog(catalog_dir).load(unique)
        await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
        avro = await _encode(registry.url, unique, AVRO, "avro", plays)
        as_json = await _encode(registry.url, unique, JSON_SCHEMA, "json", documents)
        unknown = b"\x00\x00\x00\x03\xe7" + avro[0][5:]  # schema id 999
        await _produce(kafka_settings, unique, [*avro, *as_json, unknown])
        args = ["--dest", unique, "--catalog", str(catalog_dir), "--metrics-port", "0"]
        log = tmp_path / "connector.log"
        processes.append(
            start_daemon("connector", args, bootstrap=kafka_settings.bootstrap, log_path=log)
        )
        assert await until(lambda: len(destination.delivered_ids()) == 30, 60), log.read_text()
        received = {event["id"]: event for r in destination.requests for event in r.events}
        for play in plays:
            assert received[play["id"]] == {
                "id": play["id"],
                "event_time": now_ms,
                "title": play["title"],
                "blob": "AQ==",
            }
        for document in documents:
            assert received[document["id"]] == document
        dead = await read_topic(kafka_settings, dest.dlq_topic)
        assert [(r.value, header_map(r.headers)["hifi-reason"]) for r in dead] == [
            (unknown, b"undecodable")
        ]
        assert b"Schema not found" in header_map(dead[0].headers)["hifi-error"]

        auditor = Auditor(
            [dest],
            kafka_settings,
            archive_dir=tmp_path / "archive",
            roll_s=0.5,
            topic=audit_topic,
            group_id=f"{unique}.auditor",
            metrics_port=0,
        )
        async with running(auditor):
            rows = await settled(auditor, unique, 31)
        assert sum(r["delivered"] for r in rows) == 30
        assert sum(r["dead_lettered"] for r in rows) == 1
        assert sum(r["missing"] for r in rows) == 0

        # an outage: a schema the connector has not seen, the registry down
        later = await _encode(registry.url, unique, V2, "avro", plays[:5])
        registry.down = True
        asked = len(registry.calls)
        await _produce(kafka_settings, unique, later)
        assert await until(lambda: len(registry.calls) > asked, 30)  # it asked, got 503
        assert await until(lambda: b"schema_registry_unavailable" in log.read_bytes(), 30)
        assert len(destination.delivered_ids()) == 30
        assert len(await read_topic(kafka_settings, dest.dlq_topic)) == 1  # none dead-lettered
        registry.down = False
        assert await until(lambda: len(destination.delivered_ids()) == 35, 60), log.read_text()
    assert b"schema_registry_recovered" in log.read_bytes()
    assert len(await read_topic(kafka_settings, dest.dlq_topic)) == 1
