"""The `entered` rows of one parsed poll: each event's minute, id and problem; malformed records by origin."""

from __future__ import annotations

from operator import attrgetter

from auditor.archive import EnteredColumns
from hifi.accounting.buckets import Problem, minute_of
from hifi.accounting.ledger import Ledger
from hifi.envelope import Parsed

_offset_of = attrgetter("offset")
_event_time_of = attrgetter("event_time_ms")
_kafka_ms_of = attrgetter("kafka_timestamp_ms")
_id_of = attrgetter("id")
_has_id = attrgetter("has_id")


def entered_columns(ledger: Ledger, parsed: Parsed) -> EnteredColumns:
    """The archive's `entered` columns of one parsed poll, with each event's minute and
    problem; malformed records count by origin, in their Kafka timestamp's minute."""
    events = parsed.events
    offsets = list(map(_offset_of, events))
    times = list(map(_event_time_of, events))
    kafka = list(map(_kafka_ms_of, events))
    if all(map(_has_id, events)):
        ids: list[str | None] = list(map(_id_of, events))
    else:
        ids = [event.audit_id for event in events]
    minutes, problems = ledger.buckets_for_entries(times, kafka)
    if None in ids:
        for i, event_id in enumerate(ids):
            if event_id is None and problems[i] is None:
                problems[i] = Problem.NO_ID
    for record, exc in parsed.malformed:
        at_ms = record.timestamp
        minutes.append(max(minute_of(at_ms), ledger.closed_before_ms))
        offsets.append(record.offset)
        ids.append(None)
        times.append(at_ms)
        kafka.append(at_ms)
        problems.append(Problem(str(exc.reason)))
    return EnteredColumns(minutes, offsets, ids, times, kafka, problems)
