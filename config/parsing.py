"""How a destination's settings parse its records: the connector's intake and the auditor read by the same rules.

It lives with the settings, below both components, so the auditor counts what the connector
takes in without importing the component it measures.
"""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from config.destination import Destination
from hifi.envelope import Parsed, parse_records


def parse(dest: Destination, tp: TopicPartition, records: list[Any], *, taken_ms: int) -> Parsed:
    """One partition's records parsed by `dest`'s rules, taken in at `taken_ms` (epoch ms; the
    connector's intake, the auditor and the bench's floor parse with it)."""
    return parse_records(
        tp,
        records,
        id_field=dest.id_field,
        event_time_field=dest.event_time_field,
        max_bytes=dest.max_batch_bytes,
        taken_ms=taken_ms,
        retried=tp.topic == dest.retry_out_topic,
        tenant_field=None if dest.lookups is None else dest.lookups.tenant_field,
    )
