"""The consumer: a group member's fetch, commit and rebalance calls, raising only hifi errors."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from hifi.errors import HifiError
from hifi.kafka.admin_client import leave_group
from hifi.kafka.clients import client_options, kafka_errors, running_client
from hifi.kafka.settings import Assignor, KafkaSettings

_LEAVE_TIMEOUT_S = 5.0
_STATELESS_ASSIGNORS: dict[str, type[Any]] = {
    "range": RangePartitionAssignor,
    "roundrobin": RoundRobinPartitionAssignor,
}


class Rebalance(TypedDict, total=False):
    """What a group member is told inside each rebalance (`subscribe`'s keywords): the
    partitions it was given, and, awaited first, those taken from it."""

    on_assigned: Callable[[set[TopicPartition]], None] | None
    on_revoked: Callable[[set[TopicPartition]], Awaitable[None]] | None


class Consumer:
    """An aiokafka consumer whose failures are hifi errors; the worker and readers use only this."""

    def __init__(self, client: AIOKafkaConsumer, settings: KafkaSettings) -> None:
        self._client = client
        self._settings = settings
        self._heard_s = time.monotonic()  # the group coordinator's last answer (the start before)
        self._watch_coordinator()

    def _watch_coordinator(self) -> None:
        """Note each answer of the group coordinator (to a heartbeat, a join, a commit).
        aiokafka keeps no such time: the one call its coordinator sends every request through
        is wrapped, on this instance."""
        coordinator = getattr(self._client, "_coordinator", None)
        send = getattr(coordinator, "_send_req", None)
        if send is None:
            return  # outside a group: no coordinator

        async def noted(request: Any) -> Any:
            answer = await send(request)
            self._heard_s = time.monotonic()
            return answer

        coordinator._send_req = noted  # type: ignore[union-attr]

    @property
    def session_timeout_s(self) -> float:
        """How long the group keeps this member without a heartbeat."""
        return float(getattr(self._client, "_session_timeout_ms", 10_000)) / 1000

    def last_heard_s(self) -> float:
        """`time.monotonic()` of the group coordinator's last answer to this member (a
        heartbeat, a join, a commit; the consumer's start before one)."""
        return self._heard_s

    def rejoin(self) -> None:
        """Join the group again: revocation, then an assignment read from committed offsets."""
        coordinator = getattr(self._client, "_coordinator", None)
        if coordinator is not None and hasattr(coordinator, "request_rejoin"):
            coordinator.request_rejoin()

    def subscribe(self, topics: Sequence[str], **callbacks: Unpack[Rebalance]) -> None:
        """Join the group for `topics`; the callbacks run inside rebalances, revocation first."""
        listener = _Listener(callbacks) if any(callbacks.values()) else None
        self._client.subscribe(topics=list(topics), listener=listener)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._client.assign(list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return set(self._client.assignment())

    async def topics(self) -> set[str]:
        """Every topic in the cluster, from fresh metadata."""
        with kafka_errors(self._settings, "list topics"):
            found: set[str] = await self._client.topics()
        return found

    def partitions(self, topic: str) -> list[TopicPartition]:
        """The partitions of `topic` in the cluster metadata (none if it is unknown)."""
        known = self._client.partitions_for_topic(topic) or ()
        return [TopicPartition(topic, p) for p in sorted(known)]

    async def getmany(
        self, *, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        with kafka_errors(self._settings, "fetch"):
            fetched: dict[TopicPartition, list[Any]] = await self._client.getmany(
                timeout_ms=timeout_ms, max_records=max_records
            )
        return fetched

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        with kafka_errors(self._settings, f"commit {len(offsets)} partitions"):
            await self._client.commit(offsets)

    async def committed(self, tp: TopicPartition) -> int | None:
        with kafka_errors(self._settings, f"read committed offset of {tp.topic}/{tp.partition}"):
            offset: int | None = await self._client.committed(tp)
        return offset

    async def position(self, tp: TopicPartition) -> int:
        with kafka_errors(self._settings, f"read position of {tp.topic}/{tp.partition}"):
            offset: int = await self._client.position(tp)
        return offset

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        with kafka_errors(self._settings, "seek to beginning"):
            await self._client.seek_to_beginning(*partitions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._client.seek(tp, offset)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The first offset still in the log of each partition."""
        with kafka_errors(self._settings, "read beginning offsets"):
            found: dict[TopicPartition, int] = await self._client.beginning_offsets(
                list(partitions)
            )
        return found

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset the next record of each partition will get (read_committed: the last
        stable offset)."""
        with kafka_errors(self._settings, "read end offsets"):
            found: dict[TopicPartition, int] = await self._client.end_offsets(list(partitions))
        return found

    async def committed_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Where the group reads each partition from: its committed offset, or the first offset
        still in the log where it has none (hifi's consumers reset to the earliest)."""
        asked = list(partitions)
        answers = await asyncio.gather(*(self.committed(tp) for tp in asked))  # one request each
        found = dict(zip(asked, answers, strict=True))
        none = [tp for tp, offset in found.items() if offset is None]
        begins = await self.beginning_offsets(none) if none else {}
        return {tp: begins[tp] if offset is None else offset for tp, offset in found.items()}

    async def offsets_for_times(
        self, times_ms: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The broker's answer, per partition, to "the first offset whose timestamp is at or after
        this time" (None: no such record). Some brokers answer by write time rather than by the
        record's own timestamp: `connector.backfill.positions` checks every answer."""
        asked = {tp: max(0, time_ms) for tp, time_ms in times_ms.items()}
        with kafka_errors(self._settings, "look up offsets by time"):
            found = await self._client.offsets_for_times(asked)
        return {tp: None if answer is None else answer.offset for tp, answer in found.items()}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._client.pause(*partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._client.resume(*partitions)

    def paused(self) -> set[TopicPartition]:
        return set(self._client.paused())

    def highwater(self, tp: TopicPartition) -> int | None:
        """The partition's end as seen in the last fetch response (None before one)."""
        highwater: int | None = self._client.highwater(tp)
        return highwater

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        """The partition's last stable offset in the last fetch response (None before one, -1
        when reading uncommitted): where a read_committed reader finds nothing more."""
        offset: int | None = self._client.last_stable_offset(tp)
        return offset


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, callbacks: Rebalance) -> None:
        self._on_assigned = callbacks.get("on_assigned")
        self._on_revoked = callbacks.get("on_revoked")

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if revoked and self._on_revoked is not None:
            await self._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if self._on_assigned is not None:
            self._on_assigned(set(assigned))


@contextlib.asynccontextmanager
async def open_consumer(
    settings: KafkaSettings, *, group_id: str | None, **overrides: Any
) -> AsyncIterator[Consumer]:
    """A started consumer with manual commits only, stopped when the block exits; in a group,
    it joins with the settings' assignor and, if it has one, their static instance id."""
    options: dict[str, Any] = {
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        "max_partition_fetch_bytes": 4 * 1024 * 1024,
    }
    if group_id is not None:
        options.update(membership_options(settings))
    options.update(overrides)
    if group_id is not None and settings.session_timeout_s is not None:
        options.update(session_options(settings.session_timeout_s, options))
    client = AIOKafkaConsumer(**client_options(settings), **options)
    member_id: str | None = None
    try:
        async with running_client(client, settings, "start consumer"):
            try:
                yield Consumer(client, settings)
            finally:
                if settings.instance_id is None:  # a static member keeps its place: no leave
                    member_id = _first_generation_member(client)
    finally:
        if member_id is not None and group_id is not None:
            await _leave(settings, group_id, member_id)


def membership_options(settings: KafkaSettings) -> dict[str, Any]:
    """How a group member joins: its assignors, and its group instance id if it is static.

    A member offers the chosen assignor first and roundrobin (aiokafka's default, what hifi used
    before the setting) after it, so a rolling change of `HIFI_KAFKA_ASSIGNOR` keeps one protocol
    every member supports: the group moves to the new one once every member offers it.
    Static members (KIP-345) send no LeaveGroup when they stop: their partitions wait for them
    until the session timeout (docs/rebalancing.md)."""
    assignors = [_assignor(settings.assignor)]
    if settings.assignor != "roundrobin":
        assignors.append(RoundRobinPartitionAssignor)
    options: dict[str, Any] = {"partition_assignment_strategy": tuple(assignors)}
    if settings.instance_id is not None:
        options["group_instance_id"] = settings.instance_id
    return options


def session_options(session_timeout_s: float, options: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's `HIFI_KAFKA_SESSION_TIMEOUT_S`, over the daemon's own session timeout,
    with heartbeats at least three per session (Kafka's advice; aiokafka's default is 3 s)."""
    session_ms = int(session_timeout_s * 1000)
    heartbeat_ms = min(int(options.get("heartbeat_interval_ms", 3000)), session_ms // 3)
    return {"session_timeout_ms": session_ms, "heartbeat_interval_ms": heartbeat_ms}


def _assignor(name: Assignor) -> type[Any]:
    if name != "sticky":
        return _STATELESS_ASSIGNORS[name]
    # aiokafka's sticky assignor keeps the member's last assignment, which it tells the leader
    # at the next join, on the class: a class per consumer keeps two members of one process
    # (tests, the bench) from telling each other's.
    return type("StickyPartitionAssignor", (StickyPartitionAssignor,), {})


def _first_generation_member(client: AIOKafkaConsumer) -> str | None:
    """The member id of a consumer that joined its group and is still in generation 0, which
    aiokafka does not leave when it stops (it sends LeaveGroup only from generation 1, where
    Kafka starts). Tansu 0.6 (the development broker) numbers a group's first generation 0 and
    expires no session, so without a LeaveGroup the stopped consumer stays a member for good and
    `connector rewind` refuses; on Kafka this is always None."""
    coordinator = getattr(client, "_coordinator", None)
    subscription = getattr(client, "_subscription", None)
    if coordinator is None or subscription is None:
        return None
    if getattr(coordinator, "generation", None) != 0:
        return None  # a consumer outside any group has a NoGroupCoordinator, without one
    if not subscription.partitions_auto_assigned():
        return None
    return str(coordinator.member_id) or None


async def _leave(settings: KafkaSettings, group_id: str, member_id: str) -> None:
    """The LeaveGroup aiokafka skipped: best effort within `_LEAVE_TIMEOUT_S`, as aiokafka's own."""
    with contextlib.suppress(HifiError, TimeoutError):
        async with asyncio.timeout(_LEAVE_TIMEOUT_S):
            await leave_group(settings, group_id, member_id)
