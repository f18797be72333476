"""Replay marks: each replay of NAME.dlq recorded in NAME.dlq_replays, read back as the replayed letters.

Kafka is append-only, so a replayed dead letter stays in NAME.dlq. What marks it is a record in
NAME.dlq_replays, written once per replay (several when one would exceed `MAX_RECORD_BYTES`),
keyed by the replay id, its value one compact JSON object:

    {"version":"1.0","replay_id":"4f1c…","by":"alice","at_ms":1795500060000,
     "filter":{"reason":"expired","since_ms":1795496460000},"part":1,"parts":1,
     "letters":{"0":[12,13,17],"1":[4]}}

`letters` names the dead letters by their coordinates in NAME.dlq, partition → offsets;
`filter` is what the operator asked for (absent keys: not filtered on). The topic keeps its
records as long as NAME.dlq (`dlq_retention_days`, 0 = forever; `config.topics`).

A reader takes any minor version of its major one (a newer minor only adds keys, which it
ignores) and refuses a newer major, record by record. A record it cannot use is counted and
skipped, with one warning line for all of them, never a crash: the marks of the others still
count.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import msgspec
import orjson
import structlog

from config.destination import Destination
from hifi.errors import ConfigError, ReplayRecordRefused
from hifi.kafka.clients import Record
from hifi.kafka.producing import RecordWriter
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings

log = structlog.get_logger(__name__)

FORMAT_MAJOR = 1
FORMAT_MINOR = 0
FORMAT_VERSION = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"
MAX_RECORD_BYTES = 900_000  # a replay record's value at most; a larger replay is split in parts
MAX_BY_CHARS = 200

Coordinate = tuple[int, int]  # (partition, offset) of a dead letter in NAME.dlq
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Positive = Annotated[int, msgspec.Meta(ge=1)]


class Unusable(StrEnum):
    """Why a record of NAME.dlq_replays was skipped."""

    #: the value is not a replay record of a format this reader knows
    UNDECODABLE = "undecodable"
    #: written by a newer major version of hifi
    NEWER_MAJOR = "newer_major"


class ReplayFilter(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=False):
    """What selected the letters of a replay, as the operator asked for it."""

    reason: str | None = None  # a `Reason` value
    since_ms: int | None = None  # dead-lettered at or after
    again: bool = False  # letters replayed before were included
    until_ms: int | None = None  # dead-lettered before (the dashboard's time range)
    text: str | None = None  # the dashboard's text search, masked
    letter: str | None = None  # one letter chosen on the dashboard: "partition/offset"


class ReplayRecord(msgspec.Struct, frozen=True):
    """One record of NAME.dlq_replays: one replay, or one part of a large one."""

    version: str
    replay_id: str
    by: str
    at_ms: int
    filter: ReplayFilter
    part: _Positive
    parts: _Positive
    letters: dict[_NonNegative, list[_NonNegative]]

    def coordinates(self) -> Iterator[Coordinate]:
        for partition, offsets in self.letters.items():
            for offset in offsets:
                yield partition, offset


class _Versioned(msgspec.Struct):
    version: str


_versioned = msgspec.json.Decoder(_Versioned)
_decoder = msgspec.json.Decoder(ReplayRecord)


def encode_replay(record: ReplayRecord) -> bytes:
    return orjson.dumps(msgspec.to_builtins(record, str_keys=True))


def decode_replay(value: bytes | None) -> ReplayRecord:
    """The replay record of one value; `ReplayRecordRefused` says why it cannot be used."""
    if not value:
        raise ReplayRecordRefused("replay record has no value", why=Unusable.UNDECODABLE)
    try:
        version = _versioned.decode(value).version
        if int(version.split(".", 1)[0]) > FORMAT_MAJOR:
            raise ReplayRecordRefused(
                f"replay format {version} is newer than {FORMAT_MAJOR}.x; upgrade the retrier",
                why=Unusable.NEWER_MAJOR,
            )
        return _decoder.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise ReplayRecordRefused(f"not a replay record: {exc}", why=Unusable.UNDECODABLE) from None


# --- writing ------------------------------------------------------------------------------


def checked_operator(by: str) -> str:
    """Who replays, as it goes into the record: not empty, at most `MAX_BY_CHARS`."""
    name = by.strip()
    if not name or len(name) > MAX_BY_CHARS:
        raise ConfigError(
            f"replay by {by[:40]!r}: name who replays in 1 to {MAX_BY_CHARS} characters"
        )
    return name


def build_replay_records(
    coordinates: Iterable[Coordinate],
    *,
    by: str,
    filter: ReplayFilter,
    at_ms: int,
    replay_id: str | None = None,
) -> list[ReplayRecord]:
    """The records of one replay of these letters: one, or parts of at most `MAX_RECORD_BYTES`
    each; none for no letters."""
    by_partition: dict[int, set[int]] = {}
    for partition, offset in coordinates:
        by_partition.setdefault(partition, set()).add(offset)
    if not by_partition:
        return []
    rid = replay_id or uuid.uuid4().hex
    widest = ReplayRecord(FORMAT_VERSION, rid, by, at_ms, filter, 10**6, 10**6, {})
    chunks = _chunks(by_partition, MAX_RECORD_BYTES - len(encode_replay(widest)))
    return [
        ReplayRecord(FORMAT_VERSION, rid, by, at_ms, filter, part, len(chunks), letters)
        for part, letters in enumerate(chunks, start=1)
    ]


def _chunks(by_partition: dict[int, set[int]], budget_bytes: int) -> list[dict[int, list[int]]]:
    """Partition → sorted offsets, cut where the JSON of `letters` would exceed the budget.

    Costs are upper bounds of the JSON: `"P":[` `],` per partition, the digits and a comma per
    offset."""
    chunks: list[dict[int, list[int]]] = [{}]
    used = 0
    for partition in sorted(by_partition):
        opening = len(str(partition)) + 6
        for offset in sorted(by_partition[partition]):
            current = chunks[-1]
            cost = len(str(offset)) + 1 + (0 if partition in current else opening)
            if current and used + cost > budget_bytes:
                current = {}
                chunks.append(current)
                used = 0
                cost = len(str(offset)) + 1 + opening
            current.setdefault(partition, []).append(offset)
            used += cost
    return chunks


async def record_replay(
    producer: RecordWriter,
    dest: Destination,
    coordinates: Iterable[Coordinate],
    *,
    by: str,
    filter: ReplayFilter,
    at_ms: int | None = None,
) -> list[ReplayRecord]:
    """Write the record(s) of one replay to NAME.dlq_replays; returns once the broker has
    acknowledged them (a `producer()` writes with acks=all). The topic must exist
    (`config.topics.ensure_destination_topics` creates it)."""
    when_ms = int(time.time() * 1000) if at_ms is None else at_ms
    replays = build_replay_records(
        coordinates, by=checked_operator(by), filter=filter, at_ms=when_ms
    )
    records: list[Record] = [
        (dest.dlq_replays_topic, r.replay_id.encode(), encode_replay(r), []) for r in replays
    ]
    if records:
        await producer.send_all(records)
    return replays


# --- reading ------------------------------------------------------------------------------


class Mark(msgspec.Struct, frozen=True, gc=False):
    """The last replay of a dead letter: which, when and by whom."""

    replay_id: str
    at_ms: int
    by: str

    def describe(self) -> str:
        """`replayed=2026-11-24T06:01:00Z by alice`."""
        return f"replayed={format_utc(self.at_ms)} by {self.by}"


class Skipped(msgspec.Struct, frozen=True):
    """A record of NAME.dlq_replays that was not used, and why."""

    partition: int
    offset: int
    why: Unusable
    detail: str


class ReplayMarks:
    """The replayed letters of one DLQ, each with its last replay, and the records skipped."""

    def __init__(self) -> None:
        self._marks: dict[int, dict[int, Mark]] = {}  # partition → offset → mark
        self.records = 0  #: replay records taken
        self.skipped: list[Skipped] = []

    @classmethod
    def from_records(cls, records: Iterable[Any]) -> ReplayMarks:
        """The marks of Kafka records of NAME.dlq_replays (anything with value, partition, offset)."""
        marks = cls()
        for record in records:
            try:
                replay = decode_replay(record.value)
            except ReplayRecordRefused as exc:
                why = Unusable(exc.why)
                marks.skipped.append(Skipped(record.partition, record.offset, why, str(exc)))
                continue
            marks.add(replay)
        return marks

    def add(self, replay: ReplayRecord) -> None:
        """Take one replay record (as read, or as just written by `record_replay`)."""
        mark = Mark(replay.replay_id, replay.at_ms, replay.by)
        self.records += 1
        for partition, offsets in replay.letters.items():
            marked = self._marks.setdefault(partition, {})
            for offset in offsets:
                known = marked.get(offset)
                if known is None or known.at_ms <= mark.at_ms:
                    marked[offset] = mark

    def mark_of(self, coordinate: Coordinate) -> Mark | None:
        """The last replay of the letter at these coordinates, or None if never replayed."""
        partition, offset = coordinate
        marked = self._marks.get(partition)
        return None if marked is None else marked.get(offset)

    def __contains__(self, coordinate: object) -> bool:
        return isinstance(coordinate, tuple) and self.mark_of(coordinate) is not None

    def __len__(self) -> int:
        return sum(len(marked) for marked in self._marks.values())


async def read_replay_marks(settings: KafkaSettings, dest: Destination) -> ReplayMarks:
    """The marks of every replay recorded for `dest` (none when NAME.dlq_replays does not exist);
    records that cannot be used are skipped with one warning line."""
    marks = ReplayMarks.from_records(await read_topic(settings, dest.dlq_replays_topic))
    if marks.skipped:
        first = marks.skipped[0]
        log.warning(
            "replay_records_skipped",
            topic=dest.dlq_replays_topic,
            skipped=len(marks.skipped),
            newer_major=sum(1 for s in marks.skipped if s.why is Unusable.NEWER_MAJOR),
            first=f"{first.partition}/{first.offset}: {first.detail}",
        )
    return marks


def format_utc(ms: int) -> str:
    """`2026-11-24T06:01:00Z`: a time to the second, in UTC."""
    return datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
