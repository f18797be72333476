"""A share: one source partition of the audited destinations, the unit several auditors split.

The members of an auditor group split the source partitions (`auditor/assignor.py`); each
owns the accounts of its partitions, a `Share` each: a `Ledger` per destination reading the
partition (the same ledger as one auditor keeps, over one partition), how far it applied each
partition of the audit topic (`audit_next`: a fact at a lower offset was applied already, or
was not about it), and, on the destination's lead share (its first source partition), what
the member owning it wrote of the destination's merged minutes (`auditor/lead.py`).

Each share has its own snapshot (`auditor-GROUP--TOPIC--PARTITION`), written with the rows of
each roll before the offsets behind them are committed: a share that moves in a rebalance
takes its state with it to the member that gets it, which reads it when it is assigned.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from auditor.archive import Archive, write_snapshot
from config.destination import Destination
from hifi.accounting.ledger import Ledger

SHARE_SNAPSHOT_FORMAT = 2  # the group's single snapshot (`auditor-GROUP`) is format 1


def snapshot_name(group_id: str, tp: TopicPartition) -> str:
    """The name of a share's snapshot in the archive's `_state`."""
    return f"auditor-{group_id}--{tp.topic}--{tp.partition}"


def snapshot_digest(snapshot: bytes | None) -> bytes | None:
    """What tells one snapshot's bytes from another's (None: no snapshot)."""
    return None if snapshot is None else hashlib.blake2b(snapshot, digest_size=16).digest()


def write_share_snapshot(root: Path, name: str, data: bytes) -> bytes | None:
    """Write a share's snapshot (in a thread) and return its digest, taken there too."""
    write_snapshot(root, name, data)
    return snapshot_digest(data)


@dataclass(slots=True)
class Share:
    """The accounts of one source partition, per destination that reads it."""

    tp: TopicPartition
    ledgers: dict[str, Ledger]
    audit_next: dict[int, int] = field(default_factory=dict)  # audit partition: next offset
    # audit partition: the Kafka time of the record before `audit_next` (unknown: absent)
    audit_stamps: dict[int, int] = field(default_factory=dict)
    lead: dict[str, Any] = field(default_factory=dict)  # dest: `lead.Written` state, if lead

    @classmethod
    def of(cls, tp: TopicPartition, readers: list[Destination]) -> Share:
        return cls(tp, {d.name: Ledger(d.name, d.accounting) for d in readers})

    def takes(self, audit_partition: int, offset: int) -> bool:
        """Whether the audit record at `offset` of `audit_partition` is still to apply."""
        return offset >= self.audit_next.get(audit_partition, 0)

    def applied_to(self, audit_partition: int, next_offset: int, last_ms: int) -> None:
        """Everything of `audit_partition` before `next_offset` is applied (or not its own); the
        record before it was written at `last_ms`."""
        if next_offset > self.audit_next.get(audit_partition, 0):
            self.audit_next[audit_partition] = next_offset
            self.audit_stamps[audit_partition] = last_ms

    def audit_started_over(self, audit_partition: int) -> None:
        """The audit topic was created again: its partition is to be read from its beginning."""
        self.audit_next.pop(audit_partition, None)
        self.audit_stamps.pop(audit_partition, None)

    def state(self, progress: list[list[Any]], incarnations: list[list[Any]]) -> dict[str, Any]:
        return {
            "format": SHARE_SNAPSHOT_FORMAT,
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "ledgers": {name: ledger.snapshot() for name, ledger in self.ledgers.items()},
            "audit_next": sorted(self.audit_next.items()),
            "audit_stamps": sorted(self.audit_stamps.items()),
            "progress": progress,
            "incarnations": incarnations,
            "lead": self.lead,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Carry on from a share snapshot; raises `ValueError`/`KeyError` when it is not one."""
        if state.get("format") != SHARE_SNAPSHOT_FORMAT:
            raise ValueError(f"format {state.get('format')!r}, not {SHARE_SNAPSHOT_FORMAT}")
        if (state["topic"], state["partition"]) != (self.tp.topic, self.tp.partition):
            raise ValueError(f"it is of {state['topic']}/{state['partition']}")
        for name, ledger_state in state["ledgers"].items():
            if name in self.ledgers:
                self.ledgers[name].restore(ledger_state)
        self.audit_next = {int(p): int(o) for p, o in state["audit_next"]}
        # absent from snapshots written before it: their audit topic is taken as the same one
        self.audit_stamps = {int(p): int(ms) for p, ms in state.get("audit_stamps", ())}
        self.lead = dict(state.get("lead") or {})


@dataclass(frozen=True, slots=True)
class Books:
    """What one member's intake and settling both keep: its destinations, its shares as
    assigned (the same dict `Accounts` holds), and the archive they are written to."""

    dests: Mapping[str, Destination]
    shares: dict[TopicPartition, Share]
    archive: Archive
