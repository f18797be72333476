"""Events to Kafka with acks=all: where each was written, or `BrokerUnavailable` when any was not acknowledged in time.

The producer is hifi's (`hifi.kafka.producer`: acks=all, the records of one call in order);
its request timeout bounds how long a full buffer or an unreachable broker holds a request,
and the same deadline bounds the wait for the acknowledgements, so a sender gets its 503
within `ack_timeout_s` however the broker fails. A 503 promises nothing: some of the events
may be in Kafka, and the sender resends them all (their ids let downstream drop the copies).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Protocol

from hifi.errors import BrokerUnavailable, HifiError
from hifi.kafka.clients import Record
from ingest.answers import Written


class _Metadata(Protocol):
    partition: int
    offset: int


class Writer(Protocol):
    """What `Acks` writes with: `hifi.kafka.Producer`, or a fake in tests."""

    async def append_all(
        self,
        records: Sequence[Record],
        *,
        partition: int | None = None,
        timestamps_ms: Sequence[int] | None = None,
    ) -> Awaitable[Sequence[_Metadata]]: ...


class Acks:
    """Produces records and waits, within `ack_timeout_s`, until Kafka acknowledged them."""

    def __init__(self, writer: Writer, *, ack_timeout_s: float) -> None:
        self._writer = writer
        self.ack_timeout_s = ack_timeout_s

    async def write(self, records: Sequence[Record], arrival_ms: int) -> list[Written]:
        """Where each record was written, once every one is acknowledged; `BrokerUnavailable`
        otherwise (a hifi error from the producer, or the deadline passed)."""
        acknowledged = await self.append(records, arrival_ms)
        return await self.acknowledged(acknowledged)

    async def append(
        self, records: Sequence[Record], arrival_ms: int
    ) -> Awaitable[Sequence[_Metadata]]:
        """Queue the records in order, stamped with the arrival time; await what it returns for
        their acknowledgement (through `acknowledged`)."""
        try:
            async with asyncio.timeout(self.ack_timeout_s):
                return await self._writer.append_all(
                    records, timestamps_ms=[arrival_ms] * len(records)
                )
        except TimeoutError:
            raise BrokerUnavailable(
                f"the producer had no room for the events within {self.ack_timeout_s:g} s"
            ) from None
        except HifiError as exc:
            raise _unavailable(exc) from exc

    async def acknowledged(self, pending: Awaitable[Sequence[_Metadata]]) -> list[Written]:
        try:
            async with asyncio.timeout(self.ack_timeout_s):
                written = await pending
        except TimeoutError:
            raise BrokerUnavailable(
                f"Kafka did not acknowledge the events within {self.ack_timeout_s:g} s"
            ) from None
        except HifiError as exc:
            raise _unavailable(exc) from exc
        return [Written(meta.partition, meta.offset) for meta in written]


def _unavailable(exc: HifiError) -> BrokerUnavailable:
    """Whatever kept Kafka from acknowledging (unreachable, refused, unknown topic) is, for the
    sender, the same: nothing promised, try again later; the log keeps the cause."""
    return exc if isinstance(exc, BrokerUnavailable) else BrokerUnavailable(str(exc))
