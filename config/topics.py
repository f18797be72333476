"""The Kafka topics hifi keeps for each destination, and how long each must keep its records.

An event may wait in the retry topics for up to `max_retry_age_s`, and a dead letter stays
until someone acts on it: a topic that deletes them sooner loses events that nothing counts.
So hifi creates its topics with `retention.ms` set (retry topics: `max_retry_age_s` plus a day;
the DLQ: `dlq_retention_days`, or forever), and `--check --probe` warns about existing ones
that keep their records for less. The replay marks of the DLQ (NAME.dlq_replays) are kept as
long as the DLQ: a mark deleted before its letter would let that letter be replayed again.
"""

from __future__ import annotations

from collections.abc import Sequence

from config.destination import Destination
from hifi import audit
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings


def retention_wanted(dest: Destination, tier_topics: Sequence[str] = ()) -> dict[str, int]:
    """Every topic hifi keeps for `dest`, with the retention it needs (-1: forever)."""
    retry = [dest.retry_in_topic, dest.retry_out_topic, *tier_topics]
    wanted = dict.fromkeys(retry, dest.retry_retention_ms)
    wanted[dest.dlq_topic] = dest.dlq_retention_ms
    wanted[dest.dlq_replays_topic] = dest.dlq_retention_ms
    return wanted


def audit_retention_wanted(
    dests: Sequence[Destination], environ: dict[str, str] | None = None
) -> dict[str, int]:
    """The audit topic (`HIFI_AUDIT_TOPIC`) and its retention, when any of `dests` keeps an
    audit trail: the auditor must read a fact before the topic deletes it."""
    if not any(dest.accounting.audit for dest in dests):
        return {}
    return {audit.audit_topic(environ): audit.AUDIT_RETENTION_MS}


def audit_line(dest: Destination, environ: dict[str, str] | None = None) -> str:
    """What `--check` says of a destination's audit trail."""
    if not dest.accounting.audit:
        return f"destination {dest.name}: audit trail off ([accounting] audit = false)"
    return f"destination {dest.name}: audit trail on, facts to {audit.audit_topic(environ)}"


async def ensure_destination_topics(
    settings: KafkaSettings, dest: Destination, tier_topics: Sequence[str] = ()
) -> set[str]:
    """Create whichever of `dest`'s topics are missing, each with its retention; returns the
    topics of the cluster."""
    existing: set[str] = set()
    by_retention: dict[int, list[str]] = {}
    for topic, retention_ms in retention_wanted(dest, tier_topics).items():
        by_retention.setdefault(retention_ms, []).append(topic)
    for retention_ms, topics in by_retention.items():
        existing = await kafka_admin.ensure_topics(
            settings,
            topics,
            partitions=dest.internal_topic_partitions,
            retention_ms=retention_ms,
        )
    return existing
