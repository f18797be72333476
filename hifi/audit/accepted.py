"""The audit facts of accepted events: what the ingest service had Kafka acknowledge before its 2xx.

An accepted fact (audit format 1.3, `Outcome.ACCEPTED`) is where the accounting of an event
begins: a sender got its 2xx, so from then on the event is hifi's to deliver. The ingest
service knows a stream's topic, not the destinations that read it, so the fact names the topic
(`dest` is `TOPIC_MARK` and the topic, never a destination's name: those have no `:`) and the
auditor counts it for every destination whose `source_topics` include that topic. Its events
are named by the place Kafka acknowledged them at (`topic/partition/offset`: the origin the
auditor and the connector see), with their id, their time and when ingest took them in.

The ingest service awaits the facts' acknowledgement (acks=all) before it answers 2xx: an
event a sender was promised always has its fact (a crash can repeat one, never lose one).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from itertools import groupby

from hifi.audit.columns import Observed, Seen
from hifi.audit.facts import (
    EVENTS_WRITTEN,
    FACTS_WRITTEN,
    TOPIC_MARK,
    Fact,
    build_facts,
    fact_records,
    node_name,
)
from hifi.kafka.producing import RecordWriter
from hifi.vocabulary import Outcome

__all__ = ["AcceptedTrail", "Seen", "accepted_event", "accepted_facts", "stream_dest"]


def stream_dest(topic: str) -> str:
    """The `dest` of an accepted fact about the events of `topic`: `topic:NAME`."""
    return TOPIC_MARK + topic


def accepted_event(
    topic: str, partition: int, offset: int, id: str | None, event_time_ms: int, taken_ms: int
) -> Seen:
    """One accepted event: where Kafka acknowledged it, its id, its time (the arrival time when
    it had none of its own: the record's timestamp) and when ingest took it in (the arrival)."""
    return Seen((topic, partition, offset), id, event_time_ms, taken_ms)


def _topic_of(event: Observed) -> str:
    return event.origin_parts[0]


def accepted_facts(node: str, events: Sequence[Observed], *, accepted_ms: int) -> list[Fact]:
    """The facts of accepted events: per topic, one per `MAX_EVENTS_PER_FACT` events."""
    facts: list[Fact] = []
    for topic, of_topic in groupby(sorted(events, key=_topic_of), key=_topic_of):
        facts.extend(
            build_facts(
                stream_dest(topic),
                node,
                Outcome.ACCEPTED,
                list(of_topic),
                reason=None,
                status=None,
                outcome_ms=accepted_ms,
            )
        )
    return facts


class AcceptedTrail:
    """Writes the facts of the events one ingest process accepted, to the audit topic."""

    def __init__(self, producer: RecordWriter, *, topic: str, node: str | None = None) -> None:
        """`topic`: the audit topic (`hifi.audit.audit_topic()`); `node`: `ingest@host:pid`
        unless given."""
        self._producer = producer
        self.topic = topic
        self.node = node or node_name("ingest")

    async def write(
        self, events: Sequence[Observed], *, accepted_ms: int | None = None
    ) -> Awaitable[None]:
        """Queue the facts of `events` on the producer and return what to await for the broker's
        acknowledgement (acks=all; counted in `hifi_audit_facts_total` then). Await it before
        answering 2xx. Raises what the producer raises (`HifiError`s)."""
        if not events:
            return _nothing()
        at_ms = int(time.time() * 1000) if accepted_ms is None else accepted_ms
        facts = accepted_facts(self.node, events, accepted_ms=at_ms)
        records = fact_records(self.topic, facts)
        written = await self._producer.append_all(records)
        return _counted(written, facts)


async def _counted(written: Awaitable[object], facts: list[Fact]) -> None:
    await written
    for fact in facts:
        FACTS_WRITTEN.labels(fact.dest, Outcome.ACCEPTED).inc()
        EVENTS_WRITTEN.labels(fact.dest, Outcome.ACCEPTED).inc(fact.events())


async def _nothing() -> None:
    """What is left to await when no event was accepted."""
