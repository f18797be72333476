"""A group member cut from Kafka: it waits, and after a session without heartbeats it lets go.

The worker asks `check()` on every turn of its loop, and `heard()` runs every `WATCH_EVERY_S`
besides, whatever the loop waits on (`watching()`). From the group coordinator's answers to
the member (heartbeats, joins, commits) and the daemon's `KafkaReach` it says:

- *waiting*: the coordinator silent for half a session, or a Kafka call of the daemon waits
  (`KafkaReach`): the worker starts no new work and the daemon is not ready; work already
  running goes on (its writes wait for Kafka too);
- *lost*: the coordinator silent for a whole session (`session_timeout_s`), so no heartbeat
  was answered. The group has, or
  will have, given the partitions to another member: the handler drops them, the worker
  pauses them and starts no work for them again, whatever it fetched. Once the coordinator
  answers again the member joins the group anew (`rejoin`), and the partitions are its own
  again only if the assignment says so, read from the committed offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiokafka import TopicPartition

from hifi.background import in_background
from hifi.kafka.reach import KafkaReach
from hifi.worker.seams import GroupConsumer

__all__ = ["GroupSession"]

_CALL = "group"
WATCH_EVERY_S = 0.5


class GroupSession:
    """What this member may still do with its partitions, as its heartbeats say."""

    def __init__(
        self,
        consumer: GroupConsumer,
        reach: KafkaReach,
        log: Any,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._reach = reach
        self._log = log
        self._clock = clock
        self.lost: set[TopicPartition] = set()  # let go of, until the next assignment
        self._lost_at_s: float | None = None
        self._rejoined = False

    @property
    def waiting(self) -> bool:
        """Kafka does not answer this daemon now: start no new work."""
        return not self._reach.reachable or bool(self.lost)

    def check(self, owned: set[TopicPartition]) -> set[TopicPartition]:
        """Look at the heartbeats now; return the partitions lost at this call (else none)."""
        last_s, now_s = self._consumer.last_heard_s(), self._clock()
        session_s = self._consumer.session_timeout_s
        silent_s = now_s - last_s
        self._tell_reach(silent_s)
        if self._lost_at_s is not None:
            if last_s > self._lost_at_s and not self._rejoined:
                self._rejoined = True
                self._log.info("group_rejoining", partitions=len(self.lost))
                self._consumer.rejoin()
            return set()
        if silent_s < session_s or not owned:
            return set()
        self.lost = set(owned)
        self._lost_at_s = now_s
        self._rejoined = False
        self._log.warning(
            "partitions_lost",
            partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in owned),
            silent_s=round(silent_s, 1),
            session_timeout_s=session_s,
        )
        return set(self.lost)

    def heard(self) -> None:
        """Say to the daemon's reach whether the coordinator answered within half a session."""
        self._tell_reach(self._clock() - self._consumer.last_heard_s())

    def _tell_reach(self, silent_s: float) -> None:
        if silent_s >= self._consumer.session_timeout_s / 2:
            self._reach.failed(_CALL, f"the group coordinator silent for {silent_s:.0f} s")
        else:
            self._reach.answered(_CALL)

    @contextlib.asynccontextmanager
    async def watching(self, every_s: float = WATCH_EVERY_S) -> AsyncIterator[None]:
        """While the block runs, look at the heartbeats every `every_s` too (`heard`): a turn of
        the worker's loop that itself waits on Kafka (a commit sent just before a cut) would
        otherwise show the silence only once that call gives up."""

        async def watch() -> None:
            while True:
                await asyncio.sleep(every_s)
                self.heard()

        async with in_background(watch(), name="group-session-watch"):
            yield

    def assigned(self) -> None:
        """A rebalance ended: what is owned now is owned, heard from the group just now."""
        self.lost.clear()
        self._lost_at_s = None
        self._rejoined = False
