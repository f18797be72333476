"""The worker's in-flight bound when it moves (`WorkerOptions.limit`), against a fake group member."""

from __future__ import annotations

import asyncio

from hifi.kafka.settings import KafkaSettings
from hifi.worker import PartitionWorker
from tests.hifi.fake_group import FakeGroup
from tests.hifi.worker_support import Units, options, running

TOPIC = "src"
NEVER_DIALED = KafkaSettings()  # the fake stands in for the consumer; the guard forbids dialing


def _running_now(handler: Units) -> int:
    return sum(1 for u in handler.units if u.started and not u.finished)


async def test_work_started_follows_a_moving_limit_under_the_ceiling() -> None:
    """With `limit`, the worker starts work while fewer units run than it says now (never more
    than `max_in_flight`); a lower limit lets running work finish and starts no more until
    fewer run; a higher one starts more at once."""
    group = FakeGroup(TOPIC, partitions=1)
    group.append(0, 40)
    handler = Units()
    bound = [2]
    worker = PartitionWorker(
        NEVER_DIALED, options("g", max_in_flight=6, limit=lambda: bound[0]), consumer=group.open
    )
    async with running(worker, handler, [TOPIC]):
        await handler.changes.until(lambda: len(handler.started()) == 2, "two units running")
        await asyncio.sleep(0.05)  # the behaviour: no third unit starts during this time
        assert len(handler.started()) == 2  # and no more
        bound[0] = 5
        worker.wake()
        await handler.changes.until(lambda: _running_now(handler) == 5, "five units running")
        bound[0] = 50  # above the ceiling: max_in_flight holds
        worker.wake()
        await handler.changes.until(lambda: _running_now(handler) == 6, "the ceiling of six")
        bound[0] = 1
        running_units = [u for u in handler.units if u.started and not u.finished]
        for unit in running_units[:5]:
            unit.release.set()
        await handler.changes.until(lambda: _running_now(handler) == 1, "down to one")
        started = len(handler.started())
        running_units[5].release.set()  # the last of the six: now one may start
        await handler.changes.until(lambda: len(handler.started()) == started + 1, "one more")
        assert _running_now(handler) == 1
