"""`connector rewind`: move a stopped connector's committed offsets to the first record at or after a time.

The plan reads, per source partition, the group's committed offset and where the time falls
(`connector.backfill.positions`). Committing it uses a consumer of the connector's group that is
assigned the partitions by hand and never joins the group: the broker takes such a commit only
while the group has no members, and the rewind refuses to run while it has any.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import TopicPartition

from config.destination import Destination
from connector.backfill import positions
from hifi.errors import BrokerRefused, GroupActive
from hifi.kafka import admin as kafka_admin
from hifi.kafka.admin import GroupState
from hifi.kafka.consuming import open_consumer
from hifi.kafka.settings import KafkaSettings


@dataclass(frozen=True, slots=True)
class Move:
    """One partition: where the connector would resume now, and where after the rewind."""

    position: positions.Position
    committed: int | None  # the group's committed offset (None: it never committed)

    @property
    def tp(self) -> TopicPartition:
        return self.position.tp

    @property
    def target(self) -> int:
        return self.position.offset

    @property
    def resume_now(self) -> int:
        """Where the connector would start now: its committed offset, or the beginning of the log
        when it has none (or its records were deleted)."""
        if self.committed is None:
            return self.position.begin
        return max(self.committed, self.position.begin)

    @property
    def again(self) -> int:
        """Records delivered a second time (an offset difference: markers count too)."""
        return max(0, self.resume_now - self.target)

    @property
    def skipped(self) -> int:
        """Records never delivered, when the time is after the committed offset."""
        return max(0, self.target - self.resume_now)


@dataclass(frozen=True, slots=True)
class RewindPlan:
    dest: Destination
    to_ms: int
    group: GroupState
    moves: list[Move]

    @property
    def again(self) -> int:
        return sum(move.again for move in self.moves)

    @property
    def skipped(self) -> int:
        return sum(move.skipped for move in self.moves)

    def offsets(self) -> dict[TopicPartition, int]:
        return {move.tp: move.target for move in self.moves}


def check_idle(group: GroupState, dest: Destination) -> None:
    """Raise `GroupActive` when the group has members: its offsets must not move now."""
    if group.active:
        raise GroupActive(
            f"group {group.group_id} has {group.members} active members (state"
            f" {group.state or 'unknown'}); stop every connector of destination {dest.name!r},"
            " then rewind again (a connector killed without leaving stays a member until its"
            " session expires; Tansu 0.6 expires none: start that connector and stop it with"
            " SIGTERM)"
        )


async def plan_rewind(settings: KafkaSettings, dest: Destination, to_ms: int) -> RewindPlan:
    """The moves that would put the connector's group at `to_ms` on every source partition."""
    group = await kafka_admin.describe_group(settings, dest.connector_group)
    async with positions.reader(settings) as consumer:
        partitions = await positions.source_partitions(consumer, dest)
        found = await positions.offsets_at(consumer, partitions, to_ms)
    async with open_consumer(settings, group_id=dest.connector_group) as member:
        committed = {tp: await member.committed(tp) for tp in partitions}
    moves = [Move(found[tp], committed[tp]) for tp in partitions]
    return RewindPlan(dest, to_ms, group, moves)


async def commit_rewind(settings: KafkaSettings, plan: RewindPlan) -> None:
    """Commit the plan's offsets for the connector's group, without joining it, and read them
    back. Raises `GroupActive` if a member joined since the plan, `BrokerRefused` if the broker
    kept other offsets."""
    check_idle(await kafka_admin.describe_group(settings, plan.dest.connector_group), plan.dest)
    offsets = plan.offsets()
    async with open_consumer(settings, group_id=plan.dest.connector_group) as member:
        member.assign(offsets)
        await member.commit(offsets)
        kept = {tp: await member.committed(tp) for tp in offsets}
    wrong = [f"{tp.topic}/{tp.partition}" for tp, offset in offsets.items() if kept[tp] != offset]
    if wrong:
        raise BrokerRefused(
            f"kafka {settings.bootstrap}: group {plan.dest.connector_group} kept other offsets"
            f" on {', '.join(wrong)} after the commit; check that no connector runs and rewind again"
        )
