"""`AuditTrail`: how a connector or the retrier writes the facts of its outcomes (`hifi/audit/facts.py`).

Each outcome's facts are built at once and queued on the producer with those of the other
outcomes met in the same turn of the event loop (`hifi.kafka.coalescing`), grouped into one
record per origin partition (format 1.4); the caller awaits the broker's acknowledgement
before it commits the offsets of the events. Breaker facts take the same way, in order,
keyed by the destination's name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypedDict, Unpack

from hifi.audit.columns import Observed
from hifi.audit.facts import (
    BREAKER,
    BREAKER_ERROR_MAX_CHARS,
    EVENTS_WRITTEN,
    FACT_HEADERS,
    FACTS_WRITTEN,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    BreakerChange,
    Fact,
    SentBatch,
    build_facts,
    encode_fact,
    fact_records,
    grouped_records,
)
from hifi.kafka.clients import Record
from hifi.kafka.coalescing import Coalescing
from hifi.kafka.producing import RecordWriter
from hifi.redaction import shorten
from hifi.vocabulary import Outcome, Reason

__all__ = ["AuditTrail", "OutcomeDetails"]


class OutcomeDetails(TypedDict, total=False):
    """What `AuditTrail.record`, `.write` and `.facts` take beside an outcome and its events,
    by keyword, each None when left out."""

    reason: Reason | None  # a dead letter's reason
    status: int | None  # the destination's HTTP status, when one answered
    sent: SentBatch | None  # the batch the events were sent in, if they were


class AuditTrail:
    """Writes the facts of one destination at one node; `record()` returns once acknowledged.
    The facts of outcomes written together are queued in one call (`Coalescing`), those of
    one origin partition in one record (`grouped_records`)."""

    def __init__(
        self,
        producer: RecordWriter,
        *,
        topic: str,
        dest: str,
        node: str,
        replica: str | None = None,
    ) -> None:
        """`replica`: how breaker facts name this process among a destination's connectors
        (its --instance-id); the `host:pid` of `node` when None."""
        # the facts of outcomes met together: one produce, one record per origin partition
        self._producer = Coalescing(producer, combine=grouped_records)
        self.topic = topic
        self._dest = dest
        self._node = node
        self.replica = replica or node.partition("@")[2] or node
        self._counters: dict[Outcome, tuple[Any, Any]] = {}  # FACTS_WRITTEN's, EVENTS_WRITTEN's

    def breaker_fact(
        self, *, route: str | None, state: str, since_ms: int, last_error: str | None
    ) -> Fact:
        """The `BREAKER` fact of one breaker's change; the error masked and shortened."""
        error = None if not last_error else shorten(last_error, BREAKER_ERROR_MAX_CHARS)
        change = BreakerChange(route, state, since_ms, error, self.replica)
        return Fact(
            FORMAT_MAJOR,
            FORMAT_MINOR,
            os.urandom(16).hex(),
            self._dest,
            self._node,
            BREAKER,
            None,
            None,
            int(time.time() * 1000),
            [],
            breaker=change,
        )

    async def record_breaker(self, fact: Fact) -> None:
        """Write a breaker fact and wait for its acknowledgement (counted then)."""
        record: Record = (self.topic, self._dest.encode(), encode_fact(fact), FACT_HEADERS)
        await (await self._producer.append_all([record]))
        FACTS_WRITTEN.labels(self._dest, BREAKER).inc()

    def facts(
        self,
        outcome: Outcome,
        events: Sequence[Observed],
        *,
        outcome_ms: int | None = None,
        **details: Unpack[OutcomeDetails],
    ) -> list[Fact]:
        at_ms = int(time.time() * 1000) if outcome_ms is None else outcome_ms
        return build_facts(
            self._dest,
            self._node,
            outcome,
            events,
            reason=details.get("reason"),
            status=details.get("status"),
            outcome_ms=at_ms,
            sent=details.get("sent"),
        )

    async def record(
        self, outcome: Outcome, events: Sequence[Observed], **details: Unpack[OutcomeDetails]
    ) -> None:
        """Write the facts of one outcome and wait for the broker's acknowledgement (acks=all);
        counted in `hifi_audit_facts_total` and `hifi_audit_events_total` once acknowledged."""
        await (await self.write(outcome, events, **details))

    async def write(
        self, outcome: Outcome, events: Sequence[Observed], **details: Unpack[OutcomeDetails]
    ) -> Awaitable[None]:
        """`record` in two steps: return once the facts are queued on the producer, with what
        to await for the broker's acknowledgement (the facts are counted then). The connector
        gives a request's slot to the next request while it waits."""
        if not events:
            return _nothing()
        facts = self.facts(outcome, events, **details)
        written = await self._producer.append_all(fact_records(self.topic, facts))
        return self._counted(written, outcome, facts=len(facts), events=len(events))

    async def _counted(
        self, written: Awaitable[object], outcome: Outcome, *, facts: int, events: int
    ) -> None:
        await written
        counters = self._counters.get(outcome)
        if counters is None:
            counters = (
                FACTS_WRITTEN.labels(self._dest, outcome),
                EVENTS_WRITTEN.labels(self._dest, outcome),
            )
            self._counters[outcome] = counters
        counters[0].inc(facts)
        counters[1].inc(events)


async def _nothing() -> None:
    """What is left to await of an outcome that named no events."""
