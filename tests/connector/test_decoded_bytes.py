"""With `[decode]`, what leaves for Kafka is what the producer wrote: a hand-off, a refusal's dead
letter and an undecodable record's dead letter carry the record's own bytes, never the JSON."""

from __future__ import annotations

from pathlib import Path

import httpx
import respx
from aiokafka import TopicPartition

from config.catalog import Catalog
from config.destination import Destination
from config.parsing import parse
from connector.delivery import Deliverer
from connector.divert import Diverter, Unreadable
from connector.rebatch import Batch
from connector.sender import HttpxSender
from hifi.envelope import Event
from hifi.headers import header_map
from hifi.schema_registry import DecodedRecord
from tests.helpers import FakeKafka, Sleeps

URL = "https://collector.test/in"
AVRO = b"\x00\x00\x00\x00\x01\x06e-1\x02"  # what a producer wrote (its bytes, as they are)


def _dest(catalog_dir: Path) -> Destination:
    (catalog_dir / "d.toml").write_text(
        f'url = "{URL}"\nsource_topics = ["src"]\nlocal_retry_attempts = 1\n'
        '[decode]\nkind = "schema_registry"\nurl = "http://127.0.0.1:9"\n'
    )
    return Catalog(catalog_dir, {}).load("d")


def _decoded(offset: int, value: bytes, error: str | None = None) -> DecodedRecord:
    return DecodedRecord("src", 0, offset, 1, b"k", value, [("trace", b"t")], AVRO, error)


def _events(dest: Destination) -> tuple[list[Event], list[Unreadable]]:
    records = [_decoded(0, b'{"id": "e-1", "event_time": 5}'), _decoded(1, AVRO, "404")]
    parsed = parse(dest, TopicPartition("src", 0), list(records), taken_ms=1)
    letters = [Unreadable(record, exc.reason, str(exc), 1) for record, exc in parsed.malformed]
    return parsed.events, letters


@respx.mock
async def test_a_hand_off_and_a_dead_letter_carry_the_bytes_as_written(catalog_dir: Path) -> None:
    dest = _dest(catalog_dir)
    (event,), (letter,) = _events(dest)
    assert (event.value, event.raw, event.wire_value) == (
        b'{"id": "e-1", "event_time": 5}',
        AVRO,
        AVRO,
    )
    assert letter.reason == "undecodable"
    route = respx.post(URL).mock(side_effect=[httpx.Response(503), httpx.Response(400)])
    kafka = FakeKafka()
    async with httpx.AsyncClient() as client:
        deliverer = Deliverer(
            HttpxSender(client, timeout_s=5), dest, Diverter(kafka, dest), sleep=Sleeps()
        )
        await deliverer.deliver(Batch([event]))  # 503: handed off
        await deliverer.deliver(Batch([event]))  # 400: dead-lettered
        await Diverter(kafka, dest).records_to_dlq([letter])
    assert route.calls[0].request.content == b'[{"id": "e-1", "event_time": 5}]'  # the JSON
    written = {(topic, value) for topic, _, value, _ in kafka.records}
    assert written == {("d.retry_in", AVRO), ("d.dlq", AVRO)}
    reasons = sorted(
        header_map(headers)["hifi-reason"]
        for topic, _, _, headers in kafka.records
        if topic == "d.dlq"
    )
    assert reasons == [b"http_4xx", b"undecodable"]
