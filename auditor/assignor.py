"""How the members of one auditor group share a destination: source partitions split, the audit topic read by all.

A destination's source partitions are its **shares** (`auditor/shares.py`): each member of the
group counts a disjoint set of them, round-robin over the members in member-id order. Every
member is also given every partition of the audit topic: a fact about an event lives in the
audit partition of its origin's key (`hifi/audit/keys.py`), and one audit partition holds the
facts of origins several members own, so each reads it and skips, by key, the facts that are
not about its own shares. The group's coordinator hands the leader's plan to the members as it
is (plain Kafka protocol: JoinGroup/SyncGroup with a client-side assignor, as every client
assignor works); positions in the audit topic are each share's own, kept in its snapshot, not
the group's committed offsets.

Every member offers only this protocol: a member of an older auditor (roundrobin) cannot join
the group, which Kafka refuses as `INCONSISTENT_GROUP_PROTOCOL`; stop the old auditor before
the new one starts (docs/operations.md).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import TopicPartition
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

PROTOCOL = "hifi-auditor-shares"


def plan(
    members: Mapping[str, Iterable[str]],
    partitions: Mapping[str, Iterable[int]],
    audit_topics: set[str],
) -> dict[str, dict[str, list[int]]]:
    """Per member, per topic, its partitions: each source partition to one member, round-robin
    in member-id order over the members that subscribe to its topic; every audit topic's
    partitions to every member that subscribes to it."""
    subscribed = {member: set(topics) for member, topics in members.items()}
    assignment: dict[str, dict[str, list[int]]] = {m: defaultdict(list) for m in subscribed}
    sources = sorted(
        (topic, p)
        for topic, of_topic in partitions.items()
        if topic not in audit_topics
        for p in of_topic
    )
    turn = itertools.cycle(sorted(subscribed))
    for topic, partition in sources:
        readers = [m for m in subscribed if topic in subscribed[m]]
        if not readers:
            continue
        member = next(turn)
        while topic not in subscribed[member]:
            member = next(turn)
        assignment[member][topic].append(partition)
    for topic in audit_topics & set(partitions):
        for member, topics in subscribed.items():
            if topic in topics:
                assignment[member][topic] = sorted(partitions[topic])
    return {m: dict(by_topic) for m, by_topic in assignment.items()}


def shares_assignor(audit_topic: str) -> type[AbstractPartitionAssignor]:
    """The assignor class of a member whose audit topic is `audit_topic` (a class per consumer:
    aiokafka takes classes, and the audit topic travels in the member's metadata)."""
    return type("SharesAssignor", (_SharesAssignor,), {"audit_topic": audit_topic})


class _SharesAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    name = PROTOCOL
    version = 0
    audit_topic = ""

    @classmethod
    def assign(
        cls, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        topics = {t for metadata in members.values() for t in metadata.subscription}
        partitions = {t: sorted(cluster.partitions_for_topic(t) or ()) for t in topics}
        audit_topics = {bytes(m.user_data or b"").decode() for m in members.values()} - {""}
        planned = plan(
            {member: m.subscription for member, m in members.items()}, partitions, audit_topics
        )
        return {
            member: ConsumerProtocolMemberAssignment(
                cls.version, sorted(planned[member].items()), b""
            )
            for member in members
        }

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(cls.version, list(topics), cls.audit_topic.encode())

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        return


def sources_of(partitions: Iterable[TopicPartition], audit_topic: str) -> set[TopicPartition]:
    """The source partitions among a member's: its shares."""
    return {tp for tp in partitions if tp.topic != audit_topic}
