"""How a destination's settings parse its records: the connector's intake and the auditor read by the same rules.

It lives with the settings, below both components, so the auditor counts what the connector
takes in without importing the component it measures. With `[decode]` the records come decoded
(`hifi.schema_registry.DecodedRecord`): one the registry could not explain is malformed, reason
`undecodable`, and each event keeps the bytes its producer wrote (`Event.raw`).
"""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from config.destination import Destination
from hifi.envelope import Parsed, parse_records
from hifi.errors import MalformedRecord
from hifi.vocabulary import Reason


def parse(dest: Destination, tp: TopicPartition, records: list[Any], *, taken_ms: int) -> Parsed:
    """One partition's records parsed by `dest`'s rules, taken in at `taken_ms` (epoch ms; the
    connector's intake, the auditor and the bench's floor parse with it)."""
    if dest.decode is not None:
        return _parse_decoded(dest, tp, records, taken_ms=taken_ms)
    return _parse(dest, tp, records, taken_ms)


def _parse(dest: Destination, tp: TopicPartition, records: list[Any], taken_ms: int) -> Parsed:
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


def _parse_decoded(
    dest: Destination, tp: TopicPartition, records: list[Any], *, taken_ms: int
) -> Parsed:
    decoded = [record for record in records if getattr(record, "error", None) is None]
    parsed = _parse(dest, tp, decoded, taken_ms)
    raw = {record.offset: getattr(record, "raw_value", None) for record in decoded}
    for event in parsed.events:
        event.raw = raw[event.offset]
    if len(decoded) < len(records):
        undecodable = [
            (record, MalformedRecord(f"undecodable: {record.error}", reason=Reason.UNDECODABLE))
            for record in records
            if getattr(record, "error", None) is not None
        ]
        parsed.malformed = sorted(
            [*parsed.malformed, *undecodable], key=lambda found: found[0].offset
        )
    return parsed
