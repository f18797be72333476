"""The worker lets aiokafka's next fetch go out before it takes a poll in, against the real broker.

aiokafka fetches a partition again only once a poll has emptied its buffer, and sends that
fetch from a task of its own a few turns of the event loop later. Taken in first, a poll of
thousands of records would hold the fetch back for the whole take-in (`hifi.worker.lifecycle`,
`_FETCH_TURNS`; `docs/performance.md`, the plain path). The test reads aiokafka's fetcher as
the handler takes each poll in: its fetch must already be on its way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from aiokafka import TopicPartition

from hifi.kafka import admin as kafka_admin
from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings
from hifi.worker import PartitionWorker
from tests.hifi.test_worker import produce
from tests.hifi.worker_support import FAST_GROUP, Units, options, running


class FetchWatch(Units):
    """Notes, at each take, whether the consumer's fetcher has a fetch in flight."""

    def __init__(self) -> None:
        super().__init__(auto_release=True)
        self.consumer: Consumer | None = None
        self.fetching_at_take: list[bool] = []

    @contextlib.asynccontextmanager
    async def open(self, settings: KafkaSettings, group: str) -> AsyncIterator[Consumer]:
        async with open_consumer(settings, group_id=group, **FAST_GROUP) as consumer:
            self.consumer = consumer
            yield consumer

    def take(self, tp: TopicPartition, records: list[Any]) -> None:
        assert self.consumer is not None
        fetcher = self.consumer._client._fetcher  # aiokafka's: no public view of its fetches
        self.fetching_at_take.append(bool(fetcher._in_flight))
        super().take(tp, records)


def has_taken(handler: Units, count: int) -> bool:
    return len(handler.units) == count


async def test_the_next_fetch_is_on_its_way_when_a_poll_is_taken_in(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    handler = FetchWatch()
    worker = PartitionWorker(
        kafka_settings, options(unique), consumer=lambda: handler.open(kafka_settings, unique)
    )
    async with running(worker, handler, [unique]):
        for taken in (5, 10, 15):  # three polls, each emptying aiokafka's buffer
            await produce(kafka_settings, unique, {0: 5})
            await handler.changes.until(partial(has_taken, handler, taken), f"{taken} records")
    assert len(handler.fetching_at_take) >= 3
    assert all(handler.fetching_at_take), handler.fetching_at_take
