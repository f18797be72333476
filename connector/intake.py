"""The connector's intake: how it fetches from Kafka and how much it takes in at most.

The bench's ceiling and floor read with exactly these, so they measure what the connector does;
how a partition's records are parsed is `config.parsing` (the auditor parses by it too).
"""

from __future__ import annotations

from typing import Any

from config.destination import Destination

BUFFER_WINDOWS = 2  # records buffered beyond those in flight, in units of max_in_flight batches


def consumer_options(dest: Destination) -> dict[str, Any]:
    """The connector's fetch settings (the bench's ceiling and floor read with these too)."""
    return {
        "fetch_max_bytes": 16 * 1024 * 1024,
        "max_partition_fetch_bytes": max(1024 * 1024, dest.max_batch_bytes),
        "fetch_max_wait_ms": dest.fetch_max_wait_ms,
    }


def intake_limit(dest: Destination) -> int:
    """Records taken in but not yet delivered, at most: two windows of `max_in_flight` batches."""
    return dest.max_in_flight * dest.max_batch_records * BUFFER_WINDOWS
