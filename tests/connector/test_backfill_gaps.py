"""`connector backfill` reads a partition again where a poll's offsets jump (`hifi.worker.gaps`):
against the real broker, in this process, its reader answered once without a run of records."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from connector.backfill import positions
from connector.backfill.reoffer import Backfill, BackfillRequest
from connector.backfill.selection import Selection
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from tests.connector.replay_support import BASE_MS, STEP_MS, origins_of, seed
from tests.helpers import make_destination

pytestmark = [pytest.mark.integration]


async def test_a_poll_that_left_records_out_is_read_again_and_all_are_reoffered(
    kafka_settings: KafkaSettings,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backfill's reader is answered once without records 10-19 of partition 0 (and with
    those after them, as the dev broker did): it reads the partition again from 10, and every
    record of the range is re-offered once. Taken as they came, 10-19 were passed over."""
    topic = f"{unique}.src"
    await seed(kafka_settings, topic, partitions=2, per_partition=40)
    dest = make_destination(
        catalog_dir, unique, "https://x.test/", topic, internal_topic_partitions=2
    )
    opened = positions.reader
    left_out = [TopicPartition(topic, 0)]

    @contextlib.asynccontextmanager
    async def leaving_out(settings: KafkaSettings) -> AsyncIterator[Any]:
        async with opened(settings) as consumer:
            getmany = consumer.getmany

            async def once_without(**kwargs: Any) -> dict[TopicPartition, list[Any]]:
                fetched: dict[TopicPartition, list[Any]] = await getmany(**kwargs)
                for tp in [
                    tp for tp in left_out if any(r.offset == 10 for r in fetched.get(tp, []))
                ]:
                    fetched[tp] = [r for r in fetched[tp] if not 10 <= r.offset < 20]
                    left_out.remove(tp)
                return fetched

            monkeypatch.setattr(consumer, "getmany", once_without)
            yield consumer

    monkeypatch.setattr(positions, "reader", leaving_out)
    request = BackfillRequest(
        dest, BASE_MS, BASE_MS + 40 * STEP_MS, "gaps", Selection.everything(), tmp_path / "cp"
    )
    backfill = Backfill(kafka_settings, request)
    await backfill.prepare()
    result = await backfill.run(lambda _state: None)
    assert not left_out  # the poll did leave them out
    assert result.reoffered_now == 80
    records = await read_topic(kafka_settings, f"{unique}.retry_out")
    expected = {(topic, p, i) for p in range(2) for i in range(40)}
    assert sorted(origins_of(records)) == sorted(expected)
