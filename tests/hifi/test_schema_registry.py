"""Records written by confluent-kafka's own serializers through the devstack registry, decoded to
the JSON their producer meant; what the registry cannot explain is undecodable, a registry that
does not answer is an outage (nothing undecodable), and intake waits it out."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import subprocess
import sys
import time
import uuid
from typing import Any

import orjson
import pytest
from aiokafka.structs import ConsumerRecord
from confluent_kafka.schema_registry import AsyncSchemaRegistryClient
from confluent_kafka.schema_registry.avro import AsyncAvroSerializer
from confluent_kafka.schema_registry.json_schema import AsyncJSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from devstack.schema_registry import SchemaRegistry, serving
from hifi.errors import RegistryUnavailable
from hifi.schema_registry import Decoding, RecordDecoder, RegistrySettings, to_json

TOPIC = "orders"
AVRO = orjson.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            },
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "raw", "type": "bytes"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "size", "type": {"type": "enum", "name": "Size", "symbols": ["S", "M"]}},
            {"name": "tags", "type": {"type": "map", "values": "long"}},
            {"name": "ratio", "type": "double"},
        ],
    }
).decode()
JSON_SCHEMA = orjson.dumps(
    {
        "type": "object",
        "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["id", "n"],
    }
).decode()
ORDER = {
    "id": "o-1",
    "event_time": datetime.datetime(2026, 12, 4, 12, 0, 0, 123000, tzinfo=datetime.UTC),
    "amount": decimal.Decimal("12.34"),
    "day": datetime.date(2026, 12, 4),
    "ref": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "raw": b"\x00\xff",
    "note": "first",
    "size": "M",
    "tags": {"a": 1},
    "ratio": 0.5,
}
AS_JSON = {
    "id": "o-1",
    "event_time": 1_796_385_600_123,
    "amount": "12.34",
    "day": "2026-12-04",
    "ref": "12345678-1234-5678-1234-567812345678",
    "raw": "AP8=",
    "note": "first",
    "size": "M",
    "tags": {"a": 1},
    "ratio": 0.5,
}


def _record(offset: int, value: bytes | None) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        TOPIC, 0, offset, 1, 0, None, value, None, 0, len(value or b""), [("h", b"1")]
    )


async def _avro(registry: SchemaRegistry, value: dict[str, Any]) -> bytes:
    async with AsyncSchemaRegistryClient({"url": registry.url}) as client:
        serializer = await AsyncAvroSerializer(client, AVRO)
        encoded: bytes = await serializer(value, SerializationContext(TOPIC, MessageField.VALUE))
    return encoded


async def _json(registry: SchemaRegistry, value: dict[str, Any]) -> bytes:
    async with AsyncSchemaRegistryClient({"url": registry.url}) as client:
        serializer = await AsyncJSONSerializer(JSON_SCHEMA, client)
        encoded: bytes = await serializer(value, SerializationContext(TOPIC, MessageField.VALUE))
    return encoded


async def test_avro_and_json_schema_decode_to_the_json_the_producer_meant() -> None:
    async with serving() as registry:
        avro, as_json = await _avro(registry, ORDER), await _json(registry, {"id": "j", "n": 3})
        async with RecordDecoder(RegistrySettings(registry.url)) as decoder:
            decoded = await decoder.decode([_record(0, avro), _record(1, as_json)])
    assert [d.error for d in decoded] == [None, None]
    assert orjson.loads(decoded[0].value or b"") == AS_JSON
    assert orjson.loads(decoded[1].value or b"") == {"id": "j", "n": 3}
    assert [d.raw_value for d in decoded] == [avro, as_json]  # what the producer wrote travels on
    assert [(d.offset, d.headers) for d in decoded] == [(0, [("h", b"1")]), (1, [("h", b"1")])]


async def test_schemas_are_fetched_by_id_not_per_record() -> None:
    """A schema is asked for on first sight (by id, then by id for the value's subject) and
    then served from the client's cache."""
    async with serving() as registry:
        encoded = [await _avro(registry, {**ORDER, "id": f"o-{i}"}) for i in range(50)]
        calls = len(registry.calls)
        async with RecordDecoder(RegistrySettings(registry.url)) as decoder:
            decoded = await decoder.decode([_record(i, value) for i, value in enumerate(encoded)])
        assert registry.calls[calls:] == ["GET /schemas/ids/1"] * 2
    assert [orjson.loads(d.value or b"")["id"] for d in decoded] == [f"o-{i}" for i in range(50)]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"\x00\x00\x00\x00\x63rest", "Schema not found (HTTP 404)"),
        (b'{"id": "plain json"}', "Invalid magic byte"),
        (b"\x00\x00", "unpack requires a buffer of 4 bytes"),
    ],
)
async def test_what_the_registry_cannot_explain_is_undecodable(value: bytes, expected: str) -> None:
    async with serving() as registry:
        await _avro(registry, ORDER)  # schema 1 exists; 99 does not
        async with RecordDecoder(RegistrySettings(registry.url)) as decoder:
            (decoded,) = await decoder.decode([_record(7, value)])
    assert decoded.error is not None
    assert expected in decoded.error
    assert (decoded.value, decoded.raw_value) == (value, value)


async def test_a_payload_that_does_not_match_its_schema_is_undecodable() -> None:
    async with serving() as registry:
        good = await _json(registry, {"id": "j", "n": 3})
        bad = good[:5] + b'{"id": 5}'  # the schema wants a string id and an n
        async with RecordDecoder(RegistrySettings(registry.url)) as decoder:
            (decoded,) = await decoder.decode([_record(0, bad)])
    assert decoded.error is not None
    assert decoded.raw_value == bad


async def test_a_tombstone_is_left_to_the_parser() -> None:
    async with serving() as registry, RecordDecoder(RegistrySettings(registry.url)) as decoder:
        (decoded,) = await decoder.decode([_record(0, None)])
    assert (decoded.value, decoded.error) == (None, None)


async def test_an_outage_is_the_registrys_not_the_records() -> None:
    """A 503 or a refused connection raises `RegistryUnavailable`; schemas fetched before still
    decode from the cache."""
    async with serving() as registry:
        known = await _avro(registry, ORDER)
        unknown = await _json(registry, {"id": "j", "n": 3})
        async with RecordDecoder(RegistrySettings(registry.url, timeout_s=2)) as decoder:
            await decoder.decode([_record(0, known)])
            registry.down = True
            (cached,) = await decoder.decode([_record(1, known)])
            assert cached.error is None
            with pytest.raises(RegistryUnavailable, match="answered 503"):
                await decoder.decode([_record(2, unknown)])
        url = registry.url
    async with RecordDecoder(RegistrySettings(url, timeout_s=2)) as decoder:
        with pytest.raises(RegistryUnavailable, match="unreachable"):
            await decoder.decode([_record(3, unknown)])


async def test_an_outage_between_the_schema_and_its_decoder_is_still_an_outage() -> None:
    """The registry answers the schema's first fetch, then fails the deserializer's own: the
    record waits for the registry, it is not undecodable."""
    async with serving() as registry:
        encoded = await _avro(registry, ORDER)
        registry.down_after = len(registry.calls) + 1
        async with RecordDecoder(RegistrySettings(registry.url, timeout_s=2)) as decoder:
            with pytest.raises(RegistryUnavailable, match="answered 503"):
                await decoder.decode([_record(0, encoded)])
        assert registry.calls[-2:] == ["GET /schemas/ids/1"] * 2


async def test_intake_waits_out_an_outage_then_resumes() -> None:
    """`Decoding`: None and `waiting` while the registry is down (the worker pauses and reads
    again), the records decoded once it answers; another topic is left as it is."""
    async with serving() as registry:
        encoded = await _avro(registry, ORDER)
        async with RecordDecoder(RegistrySettings(registry.url, timeout_s=2)) as decoder:
            decoding = Decoding(decoder, [TOPIC])
            other = [_record(0, b"{}")]
            assert await decoding.prepare("other", other) is other
            registry.down = True
            assert await decoding.prepare(TOPIC, [_record(0, encoded)]) is None
            assert decoding.waiting()
            assert decoding.last_error is not None
            assert await decoding.prepare(TOPIC, [_record(0, encoded)]) is None  # not asked again
            assert registry.calls.count("GET /schemas/ids/1") == 1
            registry.down = False
            deadline = time.monotonic() + 5
            while decoding.waiting() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            decoded = await decoding.prepare(TOPIC, [_record(0, encoded)])
    assert decoded is not None
    assert decoded[0].error is None
    assert decoding.last_error is None


@pytest.mark.integration
def test_a_daemon_that_decodes_writes_nothing_outside_its_log_on_import() -> None:
    """The registry client imports authlib's httpx integration, which warns on import (authlib
    1.9.10): a line on a daemon's stderr, outside its structured log."""
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", "import hifi.schema_registry"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_to_json_maps_what_json_has_no_type_for() -> None:
    naive = datetime.datetime(1970, 1, 1, 0, 0, 1)
    assert orjson.loads(to_json({"t": naive, "f": float("nan"), "b": bytearray(b"a")})) == {
        "t": 1000,
        "f": None,
        "b": "YQ==",
    }
    assert orjson.loads(to_json({"t": datetime.time(1, 2, 3)})) == {"t": "01:02:03"}


async def test_hostile_payloads_are_each_a_records_outcome_never_a_crash() -> None:
    """Random bytes behind a known schema's header, and random headers: every record comes back
    decoded or undecodable, one for one; nothing escapes (hypothesis)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    async with serving() as registry:
        await _avro(registry, ORDER)
        await _json(registry, {"id": "j", "n": 3})
        async with RecordDecoder(RegistrySettings(registry.url)) as decoder:
            loop = asyncio.get_running_loop()
            seen: list[int] = []

            @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
            @given(
                st.lists(
                    st.one_of(
                        st.binary(max_size=64),
                        st.binary(max_size=200).map(lambda b: b"\x00\x00\x00\x00\x01" + b),
                        st.binary(max_size=200).map(lambda b: b"\x00\x00\x00\x00\x02" + b),
                    ),
                    min_size=1,
                    max_size=5,
                )
            )
            def decode_all(values: list[bytes]) -> None:
                records = [_record(i, v) for i, v in enumerate(values)]
                future = asyncio.run_coroutine_threadsafe(decoder.decode(records), loop)
                decoded = future.result(timeout=30)
                assert [d.offset for d in decoded] == list(range(len(values)))
                for d in decoded:
                    assert d.raw_value == values[d.offset]
                    if d.error is None:
                        orjson.loads(d.value or b"")  # what decodes is JSON
                seen.append(len(decoded))

            await asyncio.to_thread(decode_all)
    assert seen
