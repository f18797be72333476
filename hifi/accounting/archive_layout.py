"""The archive's layout and schemas: what the auditor writes, readers (`auditor.archive.read`,
the Spark reconciliation) read, and the rules both follow.

    ROOT/{kind}/dest={name}/date={YYYY-MM-DD}/hour={HH}/part-{first_minute_ms}-{uuid8}.parquet
    ROOT/settings/dest={name}/settings-{from_ms}.json
    ROOT/_state/{name}.snapshot

`date`/`hour` are the UTC hour of each row's `minute_ms`, clamped to 1970-01-01 00 ..
9999-12-31 23 (the row keeps its own `minute_ms`). Names beginning with `.` or `_` are never
data (temporary files, state). `docs/accounting.md` ("The archive") describes each column.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import pyarrow as pa

from hifi.errors import HifiError

HOUR_MS = 3_600_000
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant a partition can name
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$")  # as config.destination's names


class Kind(StrEnum):
    """The kinds of rows, each a folder of ROOT."""

    #: one row per record the auditor saw entering a source topic
    ENTERED = "entered"
    #: one row per event per audit fact
    OUTCOMES = "outcomes"
    #: one row per destination minute each time the auditor writes its table row
    MINUTES = "minutes"


# The archive's schema version, in each Parquet file's metadata under `SCHEMA_KEY`; files
# without it are version 1. A version only adds columns: a reader reads every file of its
# version and before, a column an older file lacks as its `LATER_COLUMNS` value.
#   1: the first (`topic_epoch` came within it: files without that column read it as 0)
#   2: `minutes` gain `accepted`, the events the ingest service acknowledged to a sender
#   3: `minutes` gain `waiting`, events still held in a source partition (late, not lost)
SCHEMA_VERSION = 3
SCHEMA_KEY = b"hifi-archive-schema"


def _schema(*fields: tuple[str, Any, bool]) -> Any:
    return pa.schema(
        [pa.field(name, type_, nullable=null) for name, type_, null in fields],
        metadata={SCHEMA_KEY: str(SCHEMA_VERSION).encode()},
    )


_I32, _I64, _STR, _BOOL = pa.int32(), pa.int64(), pa.string(), pa.bool_()
# an event's origin (its source record) with its id and time: the same columns in `entered` and
# `outcomes` (the reconciliation joins the two by origin)
_EVENT_COLUMNS = (
    ("topic", _STR, False),
    ("partition", _I32, False),
    ("offset", _I64, False),
    ("event_id", _STR, True),
    ("event_time_ms", _I64, False),
)
ENTERED_SCHEMA = _schema(
    ("minute_ms", _I64, False),
    *_EVENT_COLUMNS,
    ("kafka_ms", _I64, False),
    ("observed_ms", _I64, False),
    ("problem", _STR, True),
    ("topic_epoch", _I32, False),
)
OUTCOME_SCHEMA = _schema(
    ("minute_ms", _I64, False),
    ("fact_id", _STR, False),
    ("node", _STR, False),
    ("outcome", _STR, False),
    ("reason", _STR, True),
    ("status", _I32, True),
    ("outcome_ms", _I64, False),
    *_EVENT_COLUMNS,
    ("taken_ms", _I64, False),
    ("topic_epoch", _I32, False),
)
MINUTE_SCHEMA = _schema(
    ("minute_ms", _I64, False),
    ("entered", _I64, False),
    ("accepted", _I64, False),  # schema 2
    ("delivered", _I64, False),
    ("dead_lettered", _I64, False),
    ("dead_lettered_by_reason", pa.map_(_STR, _I64), False),
    ("filtered", _I64, False),
    ("in_retry", _I64, False),
    ("waiting", _I64, False),  # schema 3
    ("missing", _I64, False),
    ("duplicates", _I64, False),
    ("lag_p50_ms", _I64, True),
    ("lag_p95_ms", _I64, True),
    ("lag_p99_ms", _I64, True),
    ("lag_in_p95_ms", _I64, True),
    ("process_p95_ms", _I64, True),
    ("final", _BOOL, False),
    ("up", _BOOL, True),
    ("down_reason", _STR, True),
    ("written_ms", _I64, False),
    ("missing_ids", pa.list_(_STR), True),
)
SCHEMAS: dict[Kind, Any] = {
    Kind.ENTERED: ENTERED_SCHEMA,
    Kind.OUTCOMES: OUTCOME_SCHEMA,
    Kind.MINUTES: MINUTE_SCHEMA,
}
MINUTE_NAMES = frozenset(MINUTE_SCHEMA.names)
ID_COLUMNS = ["minute_ms", "topic", "partition", "offset", "event_id", "topic_epoch"]
# Columns files written before them do not have: read as this value (the topic's incarnation,
# `hifi.accounting.incarnations`: 0, the first; no accepted events before schema 2).
LATER_COLUMNS = {"topic_epoch": 0, "accepted": 0, "waiting": 0}
# Outcome columns that repeat a fact's or a slice's value for each of its events: the writer
# buffers them once per slice as runs (few list appends, and runs decode faster than lists).
OUTCOME_RUNS = (
    "fact_id",
    "node",
    "outcome",
    "reason",
    "status",
    "outcome_ms",
    "topic",
    "partition",
    "topic_epoch",
)


class ArchiveError(HifiError):
    """An archive file or directory that cannot be written or read; the message names it."""


def partition_dir(root: Path, kind: Kind, dest: str, hour: int) -> Path:
    """The directory of an hour index, clamped to 1970-01-01 00 .. 9999-12-31 23."""
    at = EPOCH + timedelta(hours=min(max(hour, 0), MAX_MS // HOUR_MS))
    return root / kind / f"dest={dest}" / f"date={at:%Y-%m-%d}" / f"hour={at:%H}"


def hour_of(minute_ms: int) -> int:
    return min(max(minute_ms, 0), MAX_MS) // HOUR_MS


def why(exc: BaseException) -> str:
    """The first line of an exception's message: errors stay one line."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def check_name(what: str, name: str) -> None:
    if not NAME_RE.match(name):
        raise ArchiveError(f"archive: {what} name {name!r} is invalid; use letters, digits, . _ -")


def visible(path: Path) -> bool:
    return not path.name.startswith((".", "_"))
