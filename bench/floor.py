"""The lag floor: the connector's intake without delivery, on the live topic; no HTTP.

`python -m bench.floor --bootstrap B --topic T --deliveries-file F` reads with the connector's
fetch settings, yields to the event loop between partitions as the connector does, parses with
the connector's `parse_records`, and appends the destination's receipt line (`{id, received_ms,
event_time}`) for every event, so its lag is measured like the connector's, on the same broker,
load and machine. The connector's p95 next to this one is what delivery adds.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import click
import orjson
from aiokafka import TopicPartition

from bench.catalog import bench_destination
from config.parsing import parse
from connector.intake import consumer_options, intake_limit
from hifi.kafka.consuming import open_consumer
from hifi.kafka.settings import KafkaSettings

READY_LINE = "floor consumer ready"
_POLL_TIMEOUT_MS = 200
_COMMIT_INTERVAL_S = 1.0


async def consume(bootstrap: str, topic: str, deliveries: Path) -> None:
    """Read `topic` until SIGTERM, writing one receipt line per record."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    settings = KafkaSettings(bootstrap=bootstrap)
    dest = bench_destination(topic)
    async with open_consumer(
        settings, group_id=f"bench.floor.{topic}", **consumer_options(dest)
    ) as consumer:
        consumer.subscribe([topic])
        ready = False
        positions: dict[TopicPartition, int] = {}
        next_commit = loop.time() + _COMMIT_INTERVAL_S
        with deliveries.open("ab") as out:
            while not stop.is_set():
                fetched = await consumer.getmany(
                    timeout_ms=_POLL_TIMEOUT_MS, max_records=intake_limit(dest)
                )
                if not ready and consumer.assignment():
                    ready = True
                    print(READY_LINE, flush=True)
                received_ms = time.time_ns() // 1_000_000
                lines: list[bytes] = []
                for tp, records in fetched.items():
                    await asyncio.sleep(0)  # as the connector does: the next fetch goes out
                    parsed = parse(dest, tp, records, taken_ms=received_ms)
                    lines.extend(
                        orjson.dumps(
                            {"id": e.id, "received_ms": received_ms, "event_time": e.event_time_ms}
                        )
                        for e in parsed.events
                    )
                    positions[tp] = records[-1].offset + 1
                if lines:
                    out.write(b"\n".join(lines) + b"\n")
                    out.flush()
                if positions and loop.time() >= next_commit:
                    await consumer.commit(positions)
                    next_commit = loop.time() + _COMMIT_INTERVAL_S


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--bootstrap", required=True, help="Kafka bootstrap servers.")
@click.option("--topic", required=True, help="Topic to read from its start.")
@click.option(
    "--deliveries-file",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="NDJSON receipts, as the bench destination writes them.",
)
def main(bootstrap: str, topic: str, deliveries_file: Path) -> None:
    """Read a topic with a bare consumer and log a receipt per record, until SIGTERM."""
    asyncio.run(consume(bootstrap, topic, deliveries_file))


if __name__ == "__main__":
    main()
