"""Where each source partition still holds a destination's events: late is not lost.

An event without an outcome when its minute becomes final is not lost while a copy of it can
still be delivered: in flight at the connector, waiting behind an open breaker or a stopped
connector, or in the retrier (`in_retry`, from the facts). The first two are where the
destination's connector group has not committed yet: every record at or after its committed
offset (OffsetFetch, as `retrier/status.py` reads a group's offsets: brokers without the admin
call for a group's offsets answer it too) and at or after the log's start (retention has not
removed it) is **held**. Such an event is `waiting` (late), not `missing`.

The sampler asks every `every_s`: per destination its group's committed offsets, per source
partition its log start, then notes the wall clock. A connector writes the facts of records
before it commits their offsets, so a sample says "no outcome means lost" for the records
below a committed offset only once the auditor has read the audit topic past the sample's time
(`Holdings.held_from` takes the newest sample its progress covers, with `CLOCK_SKEW_MS` for
the writers' clocks); before any sample is covered, everything is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import structlog
from aiokafka import TopicPartition

from config.destination import Destination
from hifi.background import in_background
from hifi.errors import HifiError
from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings

log = structlog.get_logger(__name__)

DEFAULT_EVERY_S = 10.0
CLOCK_SKEW_MS = 5_000  # the writers' clocks against the auditor's: a sample is used this late
KEEP_SAMPLES = 32  # a few minutes of samples: the auditor's progress is seldom further behind
ASK_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the partitions: per destination, the first offset of each source partition
    still held for it."""

    taken_ms: int  # wall clock, once every answer was in
    held_from: dict[str, dict[TopicPartition, int]]


class Holdings:
    """The recent samples, newest last."""

    def __init__(self) -> None:
        self._samples: deque[Sample] = deque(maxlen=KEEP_SAMPLES)
        self.failing_since_ms: int | None = None  # the sampler fails since then

    def add(self, sample: Sample) -> None:
        self._samples.append(sample)

    def held_from(self, dest: str, tp: TopicPartition, progress_ms: int) -> int:
        """The first offset of `tp` still held for `dest` by the newest sample an auditor whose
        progress is `progress_ms` has read every fact for; 0 (all held) before one."""
        for sample in reversed(self._samples):
            if sample.taken_ms + CLOCK_SKEW_MS <= progress_ms:
                return sample.held_from.get(dest, {}).get(tp, 0)
        return 0

    def view(self) -> dict[str, object]:
        """For `/status`."""
        newest = self._samples[-1] if self._samples else None
        return {
            "sampled_ms": None if newest is None else newest.taken_ms,
            "failing_since_ms": self.failing_since_ms,
            "held_from": {}
            if newest is None
            else {
                dest: {f"{tp.topic}/{tp.partition}": o for tp, o in sorted(found.items())}
                for dest, found in newest.held_from.items()
            },
        }


async def sample(
    reader: Consumer, groups: dict[str, Consumer], dests: Sequence[Destination]
) -> Sample:
    """One sample: the groups' committed offsets, then the log starts."""
    await reader.topics()  # fresh metadata: partitions added since are asked too
    committed: dict[str, dict[TopicPartition, int]] = {}
    every: set[TopicPartition] = set()
    for dest in dests:
        tps = [tp for topic in dest.source_topics for tp in reader.partitions(topic)]
        every.update(tps)
        committed[dest.name] = await groups[dest.name].committed_offsets(tps) if tps else {}
    starts = await reader.beginning_offsets(sorted(every)) if every else {}
    held = {
        name: {tp: max(offset, starts.get(tp, 0)) for tp, offset in found.items()}
        for name, found in committed.items()
    }
    return Sample(int(time.time() * 1000), held)


@contextlib.asynccontextmanager
async def sampling(
    settings: KafkaSettings, dests: Sequence[Destination], *, every_s: float = DEFAULT_EVERY_S
) -> AsyncIterator[Holdings]:
    """`Holdings` sampled every `every_s` by one task that ends with the block."""
    holdings = Holdings()
    async with contextlib.AsyncExitStack() as stack:
        reader = await stack.enter_async_context(open_consumer(settings, group_id=None))
        groups = {
            dest.name: await stack.enter_async_context(
                open_consumer(settings, group_id=dest.connector_group)
            )
            for dest in dests
        }

        async def sample_forever() -> None:
            while True:
                try:
                    async with asyncio.timeout(ASK_TIMEOUT_S):
                        holdings.add(await sample(reader, groups, dests))
                    if holdings.failing_since_ms is not None:
                        log.info("holdings_sampled_again")
                    holdings.failing_since_ms = None
                except (HifiError, TimeoutError) as exc:
                    if holdings.failing_since_ms is None:
                        holdings.failing_since_ms = int(time.time() * 1000)
                        log.warning(
                            "holdings_unknown",
                            error=str(exc) or "timeout",
                            hint="events without an outcome stay waiting, none is judged"
                            " missing on a sample this old",
                        )
                await asyncio.sleep(every_s)

        async with in_background(sample_forever(), name="auditor-holdings"):
            yield holdings
