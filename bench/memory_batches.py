"""Batches made in memory, and a producer that refuses every write: for benches that drive the
connector's HTTP path (`Deliverer`) without Kafka (`bench.capacity`, `bench.http_cost`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any

import orjson
from aiokafka import TopicPartition

from connector.rebatch import Batch
from hifi.envelope import Event
from hifi.kafka.clients import Record


class RefusingProducer:
    """The diverter's producer where nothing may be handed off or dead-lettered: a write
    raises, so a run that would have lost its measurement to the retrier stops instead."""

    def __init__(self, bench: str) -> None:
        self._why = f"{bench} hands nothing off: the destination answered an error"

    async def send_all(self, records: Sequence[Record]) -> object:
        raise RuntimeError(self._why)

    async def append_all(self, records: Sequence[Record]) -> Awaitable[object]:
        raise RuntimeError(self._why)


def memory_batch(tp: TopicPartition, seq: int, size: int, prefix: str, **fields: Any) -> Batch:
    """The `seq`-th full batch of `size` events of `tp`, ids `{prefix}{seq}-{i}`, stamped now;
    `fields` are added to each event's body."""
    now_ms = int(time.time() * 1000)
    events = []
    for i in range(size):
        event_id = f"{prefix}{seq}-{i}"
        body = {"id": event_id, "event_time": now_ms, **fields}
        events.append(
            Event(
                tp=tp,
                offset=seq * size + i,
                value=orjson.dumps(body),
                id=event_id,
                event_time_ms=now_ms,
                key=None,
                headers=(),
                kafka_timestamp_ms=now_ms,
                retried=False,
                taken_ms=now_ms,
                has_id=True,
            )
        )
    return Batch(events, full=True)
