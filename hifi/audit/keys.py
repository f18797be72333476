"""How an audit fact finds its auditor: one fact per origin partition, keyed by that origin.

Several auditors of one destination share its source partitions (`auditor/shares.py`); each
must get every fact about the events of its partitions and can skip the others unread. So a
writer splits an outcome's events per origin partition (a fact names one `topic/partition`)
and keys its record `topic/partition`: the producer's partitioner puts every fact of one origin
in one partition of the audit topic, in order, and an auditor tells from the key alone, before
decoding, whether a fact is about one of its partitions.

Facts written before the split (a key that is a destination's name, or `topic:NAME` for the
ingest service's) may name several origins; an auditor decodes them and takes only the slices
of its own partitions. A topic's name never holds a `/` and a partition is a number, so the
two kinds of key are told apart by the last `/`.
"""

from __future__ import annotations

from hifi.audit.columns import Slice

_SEPARATOR = "/"


def origin_key(topic: str, partition: int) -> bytes:
    """The record key of a fact about the events of `topic/partition`."""
    return f"{topic}{_SEPARATOR}{partition}".encode()


def origin_of_key(key: bytes | None) -> tuple[str, int] | None:
    """The origin a fact's key names, or None for a key of a fact written before the split
    (a destination's name, `topic:NAME`, or no key), which may name several origins."""
    if not key:
        return None
    topic, separator, partition = key.decode(errors="replace").rpartition(_SEPARATOR)
    if not separator or not topic or not (partition.isascii() and partition.isdigit()):
        return None
    return topic, int(partition)


def chunks_of(part: Slice, max_events: int) -> list[Slice]:
    """`part` in slices of at most `max_events` events (a fact's size bound)."""
    if len(part.offsets) <= max_events:
        return [part]
    return [
        Slice(
            part.topic,
            part.partition,
            part.offsets[start : start + max_events],
            part.ids[start : start + max_events],
            part.event_times_ms[start : start + max_events],
            part.taken_ms[start : start + max_events],
        )
        for start in range(0, len(part.offsets), max_events)
    ]
