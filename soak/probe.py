"""The broker alone: a bare consumer of the soak's source topics (the first partition of each,
a sample), in a process of its own, with the connectors' fetch wait and none of their work.
Each record's lag runs from its producer's timestamp (ingest's: the request's arrival) to its
arrival here, cut by the minute of that timestamp. A minute whose p95 the broker alone takes
past `lag_sla_s` can be on time for no consumer of it; beside the auditors' part before the
connector, it tells the broker's wait from the pipeline's (docs/reliability.md, "The soak").

`python -m soak.probe --topic T [--topic T ...] --out FILE [--partitions-per-topic N]` reads
from the topics' ends, on the Kafka that `HIFI_KAFKA_*` name, until SIGTERM; then it writes
each minute's percentiles to FILE (JSON) and exits 0: what was written before the stop is
counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from array import array
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import msgspec
from aiokafka import TopicPartition

from bench.report import say
from chaos.audit import minute_of
from hifi.errors import BrokerUnavailable
from hifi.kafka import reading
from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings
from soak.ledger import Lags, percentiles
from soak.stack import FETCH_MAX_WAIT_MS, PLAIN, TENANTS_DEST, Stack

_POLL_MS = 200
_STOP_TIMEOUT_S = 30.0
#: the soak's sample: the first partition of each source topic, a quarter of its records
SAMPLED_PARTITIONS = 1
_TO_THE_END_S = 10.0  # at the start and the stop, reading on to the topics' ends


async def read(
    settings: KafkaSettings,
    topics: Sequence[str],
    fetch_max_wait_ms: int,
    stop: asyncio.Event,
    *,
    partitions_per_topic: int | None = None,
) -> dict[int, array[int]]:
    """Every record written to `topics` from now until `stop` (and read by then): its lag in
    ms, by the minute of its timestamp (epoch ms). `partitions_per_topic`: only the first so
    many of each topic's partitions, a sample (the dev broker's fetch costs it CPU for each
    partition it reads)."""
    lags: dict[int, array[int]] = {}
    async with open_consumer(
        settings, group_id=None, fetch_max_wait_ms=fetch_max_wait_ms
    ) as consumer:
        await consumer.topics()
        partitions = [
            tp
            for topic in topics
            for tp in sorted(consumer.partitions(topic))[:partitions_per_topic]
        ]
        if not partitions:
            raise click.ClickException(f"no partitions found for {', '.join(topics)}")
        consumer.assign(partitions)
        for tp, end in (await consumer.end_offsets(partitions)).items():
            consumer.seek(tp, end)
        # Tansu answers ListOffsets "latest" with its last batch's base offset plus one
        # (docs/backfill.md): what the topics held is read past, not counted
        await _to_the_end(consumer, partitions, None)
        print(f"probe: reading {len(partitions)} partitions from their ends", flush=True)
        while not stop.is_set():
            _take(await fetch(consumer), lags)
        await _to_the_end(consumer, partitions, lags)  # what was written before the stop
    return lags


async def _to_the_end(
    consumer: Consumer, partitions: Sequence[TopicPartition], lags: dict[int, array[int]] | None
) -> None:
    """Fetch until every partition's position reached the end its last fetch reported, for
    at most `_TO_THE_END_S`; each record's lag into `lags` unless None."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _TO_THE_END_S
    while loop.time() < deadline:
        fetched = await fetch(consumer)
        if lags is not None:
            _take(fetched, lags)
        if await reading.at_end(consumer, partitions):
            return


async def fetch(consumer: Consumer) -> Mapping[TopicPartition, list[Any]]:
    """One poll's records; none, after a pause, while the broker does not answer (frozen,
    restarting): the probe waits for it as the daemons do, its minutes kept."""
    try:
        return await consumer.getmany(timeout_ms=_POLL_MS)
    except BrokerUnavailable as exc:
        print(f"probe: {exc}", flush=True)
        await asyncio.sleep(_POLL_MS / 1000)
        return {}


def _take(fetched: Mapping[TopicPartition, list[Any]], lags: dict[int, array[int]]) -> None:
    now_ms = time.time_ns() // 1_000_000
    for batch in fetched.values():
        for record in batch:
            minute = lags.setdefault(minute_of(record.timestamp), array("I"))
            minute.append(max(0, now_ms - record.timestamp))


def load(path: Path) -> dict[int, Lags]:
    """What a probe wrote: each minute's percentiles, by the minute's start (epoch ms)."""
    found = msgspec.json.decode(path.read_bytes(), type=dict[int, Lags])
    return dict(sorted(found.items()))


@contextlib.asynccontextmanager
async def running(stack: Stack, out: Path) -> AsyncIterator[dict[int, Lags]]:
    """A probe process reading the stack's source topics while the block runs, on its broker
    and with its connectors' fetch wait; the dict it yields is filled with its minutes once the
    block exits (left empty when the probe failed: its log is beside `out`)."""
    command = [sys.executable, "-m", "soak.probe", "--out", str(out)]
    command += ["--fetch-max-wait-ms", str(FETCH_MAX_WAIT_MS)]
    command += ["--partitions-per-topic", str(SAMPLED_PARTITIONS)]
    for dest in (PLAIN, TENANTS_DEST):
        command += ["--topic", stack.topic(dest)]
    log = await asyncio.to_thread(open, out.with_suffix(".log"), "ab")
    with log:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            env={**os.environ, **stack.settings.environment()},
        )
    minutes: dict[int, Lags] = {}
    try:
        yield minutes
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), _STOP_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            await process.wait()
        if process.returncode == 0:
            minutes.update(await asyncio.to_thread(load, out))
        else:
            say(f"   the broker probe exited {process.returncode}: see {out.with_suffix('.log')}")


async def _main(
    topics: Sequence[str], out: Path, fetch_max_wait_ms: int, partitions_per_topic: int | None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    settings = KafkaSettings.from_env()
    lags = await read(
        settings, topics, fetch_max_wait_ms, stop, partitions_per_topic=partitions_per_topic
    )
    found = {minute: percentiles(values) for minute, values in lags.items()}
    await asyncio.to_thread(out.write_bytes, msgspec.json.encode(found))


@click.command()
@click.option("--topic", "topics", multiple=True, required=True, help="a topic to read")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="the JSON written")
@click.option("--fetch-max-wait-ms", type=click.IntRange(1, 60_000), default=100, show_default=True)
@click.option(
    "--partitions-per-topic",
    type=click.IntRange(min=1),
    default=None,
    help="read only the first N partitions of each topic (default: all)",
)
def main(
    topics: tuple[str, ...], out: Path, fetch_max_wait_ms: int, partitions_per_topic: int | None
) -> None:
    asyncio.run(_main(topics, out, fetch_max_wait_ms, partitions_per_topic))


if __name__ == "__main__":
    main()
