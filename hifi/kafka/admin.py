"""Kafka admin requests: create and list topics, read their retention, describe and leave a consumer group."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import structlog
from aiokafka import errors as aiokafka_errors
from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from hifi.errors import BrokerRefused
from hifi.kafka.admin_client import admin_client as _admin
from hifi.kafka.admin_client import leave_group
from hifi.kafka.clients import kafka_errors
from hifi.kafka.consuming import open_consumer
from hifi.kafka.settings import KafkaSettings

__all__ = [
    "GroupState",
    "describe_group",
    "ensure_topics",
    "leave_group",
    "list_topics",
    "partitions_of",
    "retention_ms",
]

log = structlog.get_logger(__name__)

_TOPIC_ALREADY_EXISTS = 36  # Kafka protocol error code: another client created it first


async def ensure_topics(
    settings: KafkaSettings,
    names: Iterable[str],
    *,
    partitions: int,
    retention_ms: int | None = None,
) -> set[str]:
    """Create whichever of `names` do not exist yet; returns every topic of the cluster.

    `retention_ms` is set on the topics it creates (-1 keeps records forever; None leaves the
    broker's default); existing topics are left as they are (`--check --probe` reports them).
    """
    configs = {"retention.ms": str(retention_ms)} if retention_ms is not None else {}
    async with _admin(settings) as admin:
        with kafka_errors(settings, "create topics"):
            existing = set(await admin.list_topics())
            missing = [name for name in names if name not in existing]
            if not missing:
                return existing
            response = await admin.create_topics(
                [
                    NewTopic(name, partitions, settings.replication_factor, topic_configs=configs)
                    for name in missing
                ]
            )
        failed = [
            f"{error[0]}: error {error[1]}"
            for error in response.topic_errors
            if error[1] not in (0, _TOPIC_ALREADY_EXISTS)
        ]
        if failed:
            raise BrokerRefused(
                f"kafka {settings.bootstrap}: cannot create topics: {', '.join(failed)}"
            )
        log.info("topics_created", topics=missing, partitions=partitions, **configs)
        return existing | set(missing)


async def partitions_of(settings: KafkaSettings, topics: Sequence[str]) -> dict[str, list[int]]:
    """The partitions of each of `topics` that exists, from the cluster's metadata."""
    async with open_consumer(settings, group_id=None) as reader:
        await reader.topics()
        return {topic: sorted(tp.partition for tp in reader.partitions(topic)) for topic in topics}


async def list_topics(settings: KafkaSettings) -> set[str]:
    """Every topic of the cluster."""
    async with _admin(settings) as admin:
        with kafka_errors(settings, "list topics"):
            return set(await admin.list_topics())


async def retention_ms(settings: KafkaSettings, names: Sequence[str]) -> dict[str, int | None]:
    """Each topic's `retention.ms` as the broker reports it (None where it reports none)."""
    if not names:
        return {}
    async with _admin(settings) as admin:
        with kafka_errors(settings, "describe topic configs"):
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
            )
    found: dict[str, int | None] = dict.fromkeys(names)
    for response in responses:
        for _error, _message, _type, name, entries in response.resources:
            for entry in entries:
                if entry[0] == "retention.ms" and entry[1] is not None:
                    found[name] = int(entry[1])
    return found


@dataclass(frozen=True, slots=True)
class GroupState:
    """A consumer group as DescribeGroups reports it."""

    group_id: str
    state: str  # Empty, Stable, PreparingRebalance, CompletingRebalance, Dead ("" if unknown)
    members: int  # members that joined and have not left

    @property
    def active(self) -> bool:
        """Some member may consume and commit: it has members, or is between generations."""
        return self.members > 0 or self.state not in ("", "Empty", "Dead")


async def describe_group(settings: KafkaSettings, group_id: str) -> GroupState:
    """The state and member count of a consumer group (a group never used is Dead or Empty)."""
    async with _admin(settings) as admin:
        with kafka_errors(settings, f"describe group {group_id}"):
            responses = await admin.describe_consumer_groups([group_id])
            for response in responses:
                for group in response.groups:
                    error_code, found_id, state, _protocol_type, _protocol, members = group[:6]
                    if found_id != group_id:
                        continue
                    if error_code:
                        raise aiokafka_errors.for_code(error_code)(f"group {group_id}")
                    return GroupState(group_id, state or "", len(members))
    return GroupState(group_id, "", 0)
