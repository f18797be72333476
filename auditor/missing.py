"""A final minute's missing events named: their origins, then their ids from the archive's entered rows."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from aiokafka import TopicPartition
from pyroaring import BitMap

from auditor.archive.read import find_ids
from auditor.shares import Share
from hifi.accounting.buckets import Bucket, Partition
from hifi.accounting.ledger import MAX_MISSING_IDS

# What a member names: a share, a destination, a final minute and its missing events' origins.
Resolve = tuple[TopicPartition, str, int, dict[Partition, list[int]]]


def missing_origins(
    bucket: Bucket, held_from: Mapping[Partition, int] | None = None
) -> dict[Partition, list[int]]:
    """The origins of up to `MAX_MISSING_IDS` missing events of a final bucket (those without
    an outcome, never handed off and no longer held at or after `held_from`), by partition as
    the ledgers key them."""
    origins: dict[Partition, list[int]] = {}
    left = MAX_MISSING_IDS
    for tp, waiting in bucket.waiting.items():
        lost = waiting - bucket.retrying.get(tp, BitMap())
        held = None if held_from is None else held_from.get(tp)
        if held is not None and lost:  # still held (and seen entering): waiting, not lost
            kept = lost - bucket.unseen.get(tp, BitMap())
            kept.remove_range(0, held)
            lost -= kept
        if lost and left > 0:
            offsets = list(lost)[:left]
            origins[tp] = offsets
            left -= len(offsets)
    return origins


def unnamed(tp: TopicPartition, share: Share) -> list[Resolve]:
    """The final minutes of a share just opened whose missing events were never named: its
    member names them in the roll after the one that made them final, and a member killed
    before its next snapshot leaves them unnamed there (the next owner names them)."""
    found: list[Resolve] = []
    for dest, ledger in share.ledgers.items():
        for bucket in ledger.buckets.values():
            if bucket.final and bucket.missing_ids is None and ledger.tally(bucket).missing:
                origins = missing_origins(bucket, ledger.held_from)
                found.append((tp, dest, bucket.minute_ms, origins))
    return found


async def missing_ids(
    root: Path, dest: str, minute_ms: int, origins: dict[Partition, list[int]]
) -> list[str]:
    """The ids of the missing events at `origins`, sorted, read from the archive's entered rows
    in a thread (`HifiError` when they cannot be read). An event without an id, or one the
    auditor never saw entering (accepted by the ingest service, then lost), is named by its
    origin, `topic/partition/offset`."""
    found = await asyncio.to_thread(find_ids, root, dest, {minute_ms: origins})
    return sorted(
        found.get((topic, partition, offset)) or f"{topic}/{partition}/{offset}"
        for (topic, partition), offsets in origins.items()
        for offset in offsets
    )
