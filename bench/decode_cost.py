"""`make bench`'s decoding phase: what `[decode]` costs (docs/schema-registry.md).

The same events are written twice, each to a fresh broker: as the bench's 1 KB JSON, and as Avro
through confluent-kafka's serializer and the devstack registry (the same fields, so the decoded
JSON is the event as written). The connector drains each, the Avro topic with `[decode]`, in
`PAIRS` pairs of alternating order; `avro_over_json` is the median pair's Avro events/s over its
JSON events/s.

    .venv/bin/python -m bench.decode_cost [--events 100000]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import orjson

from bench import phases
from bench.report import Row, say
from devstack.schema_registry import serving
from hifi import schema_registry  # noqa: F401  (first: it quiets authlib's warning on import)

# isort: split
from confluent_kafka.schema_registry import AsyncSchemaRegistryClient
from confluent_kafka.schema_registry.avro import AsyncAvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

EVENTS = 100_000
PARTITIONS = 4
PAIRS = 2
TOPIC = "decode.avro"
SCHEMA = orjson.dumps(
    {
        "type": "record",
        "name": "BenchEvent",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "event_time", "type": "long"},
            {"name": "seq", "type": "long"},
            {"name": "payload", "type": "string"},
        ],
    }
).decode()


@dataclass(frozen=True)
class DecodePair:
    avro: phases.Throughput
    json: phases.Throughput

    @property
    def ratio(self) -> float:
        return self.avro.events_per_s / self.json.events_per_s if self.json.events_per_s else 0.0


@dataclass(frozen=True)
class DecodeCost:
    pairs: list[DecodePair]

    @property
    def avro_over_json(self) -> float:
        return statistics.median_low(pair.ratio for pair in self.pairs)

    def rows(self, events: int) -> list[Row]:
        median = min(self.pairs, key=lambda pair: abs(pair.ratio - self.avro_over_json))
        return [
            Row("[decode] Avro, same events", None, events, median.avro.delivered,
                median.avro.events_per_s, 0.0, 0.0),
            Row("  as JSON, no [decode]", None, events, median.json.delivered,
                median.json.events_per_s, 0.0, 0.0),
        ]  # fmt: skip

    def report(self) -> dict[str, object]:
        return {
            "avro_over_json": self.avro_over_json,
            "pairs": [asdict(pair) for pair in self.pairs],
        }


class _AvroWriter:
    """The bench's JSON events, written as Avro by the library's serializer."""

    def __init__(self, client: AsyncSchemaRegistryClient) -> None:
        self._client = client
        self._serializer: AsyncAvroSerializer | None = None
        self._context = SerializationContext(TOPIC, MessageField.VALUE)

    async def __call__(self, values: list[bytes]) -> list[bytes]:
        if self._serializer is None:
            self._serializer = await AsyncAvroSerializer(self._client, SCHEMA)
        serializer, written = self._serializer, []
        for value in values:
            encoded = await serializer(orjson.loads(value), self._context)
            assert encoded is not None  # a record, never None
            written.append(encoded)
        return written


async def _drain(work: Path, events: int, registry_url: str | None) -> phases.Throughput:
    name = "avro" if registry_url is not None else "json"
    if registry_url is None:
        drained = await phases.fresh_drain(
            work / name, topic=TOPIC, prefix=name, events=events, partitions=PARTITIONS
        )
    else:
        async with AsyncSchemaRegistryClient({"url": registry_url}) as client:
            drained = await phases.fresh_drain(
                work / name,
                topic=TOPIC,
                prefix=name,
                events=events,
                partitions=PARTITIONS,
                decode_url=registry_url,
                transform=_AvroWriter(client),
            )
    if drained.delivered < events:
        raise RuntimeError(f"{name}: {drained.delivered} of {events} delivered")
    return drained


async def run_phase(work: Path, events: int = EVENTS, pairs: int = PAIRS) -> DecodeCost:
    """`pairs` pairs of an Avro drain with `[decode]` and a JSON drain of `events` events."""
    measured = []
    async with serving() as registry:
        for index in range(pairs):
            say(f"9. [decode]: Avro against JSON, {events} events ({index + 1} of {pairs})")
            urls = (registry.url, None) if index % 2 == 0 else (None, registry.url)
            runs = {
                url is not None: await _drain(work / f"pair{index}", events, url) for url in urls
            }
            measured.append(DecodePair(runs[True], runs[False]))
            say(f"   Avro {runs[True].events_per_s:.0f}/s, JSON {runs[False].events_per_s:.0f}/s")
    return DecodeCost(measured)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--events", type=click.IntRange(1000), default=EVENTS, show_default=True)
@click.option("--pairs", type=click.IntRange(1, 10), default=PAIRS, show_default=True)
def main(events: int, pairs: int) -> None:
    """The decoding phase alone; the last line its figure."""
    with tempfile.TemporaryDirectory(prefix="hifi-bench-decode-") as tmp:
        cost = asyncio.run(run_phase(Path(tmp), events, pairs))
    print(f"decode: avro_over_json={cost.avro_over_json:.3f}")


if __name__ == "__main__":
    main()
