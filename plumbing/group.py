"""Consumer-group membership: the one rebalance listener every hifi daemon uses."""

from __future__ import annotations

from typing import Protocol

import structlog
from aiokafka import ConsumerRebalanceListener, TopicPartition

log = structlog.get_logger(__name__)


class PartitionOwner(Protocol):
    """A daemon that owns partitions between rebalances."""

    async def release(self, partitions: set[TopicPartition]) -> None:
        """Stop starting work for `partitions`, wait for theirs, commit, forget them."""

    def assigned(self, partitions: set[TopicPartition]) -> None:
        """Partitions now owned (possibly none); the daemon is ready from here on."""


class GroupListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands revocations and assignments to the owning daemon, and logs the new assignment."""

    def __init__(self, owner: PartitionOwner, **log_context: str) -> None:
        self._owner = owner
        self._log = log.bind(**log_context)

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if revoked:
            await self._owner.release(set(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self._owner.assigned(set(assigned))
        self._log.info(
            "partitions_assigned",
            partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in assigned),
        )
