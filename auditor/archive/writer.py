"""The auditor's archive: its rows as Hive-partitioned Parquet files (zstd), each written atomically.

    ROOT/{kind}/dest={name}/date={YYYY-MM-DD}/hour={HH}/part-{first_minute_ms}-{uuid8}.parquet
    ROOT/settings/dest={name}/settings-{from_ms}.json
    ROOT/_state/{name}.snapshot

`date`/`hour` are the UTC hour of each row's `minute_ms`, clamped to 1970-01-01 00 ..
9999-12-31 23 (the row keeps its own `minute_ms`). A file is written under a name readers skip
(`.part-....parquet.tmp`), fsync'ed, renamed, and its directory fsync'ed: a crash leaves a
complete file or a temporary one, never a partial file under a visible name. `Archive` buffers
rows on the caller's thread; `PendingFiles.write()` writes them, in a worker thread.
`docs/accounting.md` ("The archive") describes each column and how to read the files.

Errors: `ArchiveError` (a `HifiError`) names the file or directory and what is wrong; a root
that is a file or is not writable is a `ConfigError` naming `--archive`.
"""

from __future__ import annotations

import bisect
import os
import tempfile
import time
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from auditor.archive.files import STALE_TEMP_S, remove_stale_temp_files, write_part
from hifi.accounting.archive_layout import (
    ENTERED_SCHEMA,
    HOUR_MS,
    MINUTE_NAMES,
    MINUTE_SCHEMA,
    OUTCOME_RUNS,
    OUTCOME_SCHEMA,
    SCHEMAS,
    ArchiveError,
    Kind,
    check_name,
    why,
)
from hifi.audit import Fact, Slice
from hifi.errors import ConfigError

_ARRAY_CODES = {pa.int64(): "q", pa.int32(): "i"}  # array type codes of the same width
_OUTCOME_EVENT_FIELDS = [field for field in OUTCOME_SCHEMA if field.name not in OUTCOME_RUNS]
# Entered columns that repeat one poll's value for each of its records: runs, as for outcomes.
_ENTERED_RUNS = ("topic", "partition", "observed_ms", "topic_epoch")
_ENTERED_EVENT_FIELDS = [field for field in ENTERED_SCHEMA if field.name not in _ENTERED_RUNS]
_RUNS: dict[Kind, tuple[str, ...]] = {Kind.ENTERED: _ENTERED_RUNS, Kind.OUTCOMES: OUTCOME_RUNS}


@dataclass(slots=True)
class EnteredColumns:
    """The `entered` rows of one poll of one partition, as columns of equal length."""

    minutes_ms: list[int]
    offsets: list[int]
    ids: list[str | None]
    event_times_ms: list[int]
    kafka_ms: list[int]
    problems: list[str | None]


class _Rows:
    """Rows of one kind, destination and hour: a column per field, repeated columns as runs.

    A non-null integer column is an `array` (8 or 4 bytes a value, handed to Arrow without a
    copy); the others are lists, converted when written.
    """

    __slots__ = ("columns", "run_ends", "run_values")

    def __init__(self, fields: Sequence[Any], run_columns: int = 0) -> None:
        self.columns: list[Any] = [_new_column(field) for field in fields]
        self.run_values: list[list[Any]] = [[] for _ in range(run_columns)]
        self.run_ends: list[int] = []  # the row count at the end of each run

    def truncate(self, rows: int) -> None:
        """Drop the values of rows past `rows`: a row that failed halfway leaves no trace."""
        for column in self.columns:
            del column[rows:]
        runs = bisect.bisect_right(self.run_ends, rows)
        for values in (self.run_ends, *self.run_values):
            del values[runs:]

    def add_run(self, values: Sequence[Any], rows: int) -> None:
        for column, value in zip(self.run_values, values, strict=True):
            column.append(value)
        self.run_ends.append((self.run_ends[-1] if self.run_ends else 0) + rows)


def _new_column(field: Any) -> Any:
    code = None if field.nullable else _ARRAY_CODES.get(field.type)
    return [] if code is None else array(code)


def _to_arrow(column: Any, type_: Any) -> Any:
    if isinstance(column, array):  # no copy: Arrow reads the array's buffer as it is
        return pa.Array.from_buffers(type_, len(column), [None, pa.py_buffer(column)])
    return pa.array(column, type=type_)


Buffer = dict[str, dict[int, _Rows]]  # destination -> hour index since the epoch -> rows


class Archive:
    """Buffers rows per kind, destination and hour until `take()`; not thread-safe."""

    def __init__(self, root: Path) -> None:
        """Create `root` if missing, check that it is writable, remove stale temporary files."""
        try:
            root.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ConfigError(f"--archive {root}: is a file, not a directory") from None
        except OSError as exc:
            raise ConfigError(f"--archive {root}: cannot create it: {why(exc)}") from None
        try:
            fd, probe = tempfile.mkstemp(dir=root, prefix=".probe-", suffix=".tmp")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(f"--archive {root}: not writable: {why(exc)}") from None
        self.root = root
        remove_stale_temp_files(root, time.time() - STALE_TEMP_S)
        self._entered: Buffer = {}
        self._outcomes: Buffer = {}
        self._minutes: Buffer = {}
        self._rows = 0

    def entered_many(
        self,
        dest: str,
        topic: str,
        partition: int,
        observed_ms: int,
        columns: EnteredColumns,
        *,
        epoch: int = 0,
    ) -> None:
        """Buffer the `entered` rows of one poll of one partition (of incarnation `epoch`),
        a column at a time."""
        n = len(columns.offsets)
        if n == 0:
            return
        per_event = (
            columns.minutes_ms,
            columns.offsets,
            columns.ids,
            columns.event_times_ms,
            columns.kafka_ms,
            columns.problems,
        )
        if any(len(column) != n for column in per_event):
            raise ValueError(f"entered columns of {topic}/{partition} differ in length")
        if type(topic) is not str or type(partition) is not int or type(observed_ms) is not int:
            raise TypeError(f"entered rows of {topic!r}/{partition!r} at {observed_ms!r}")
        touched: list[tuple[_Rows, int]] = []
        try:
            for hour, (minutes, offsets, ids, times, kafka, problems) in _split_by_hour(
                columns.minutes_ms, per_event
            ).items():
                rows = self._entered.get(dest, {}).get(hour)
                if rows is None:
                    rows = _new_rows(
                        self._entered, dest, hour, _ENTERED_EVENT_FIELDS, len(_ENTERED_RUNS)
                    )
                cols = rows.columns
                touched.append((rows, len(cols[0])))
                cols[0].extend(minutes)
                cols[1].extend(offsets)
                cols[2].extend(ids)
                cols[3].extend(times)
                cols[4].extend(kafka)
                cols[5].extend(problems)
                rows.add_run((topic, partition, observed_ms, epoch), len(minutes))
        except (TypeError, OverflowError):
            for rows, before in touched:
                rows.truncate(before)
            raise
        self._rows += n

    def outcomes(
        self, dest: str, minute_ms: Sequence[int], fact: Fact, part: Slice, *, epoch: int = 0
    ) -> None:
        """Buffer one row of `outcomes` per event of `part` (of its topic's incarnation
        `epoch`); `minute_ms[i]` is event i's minute."""
        n = len(part.offsets)
        if len(minute_ms) != n:
            raise ValueError(f"{len(minute_ms)} minutes for the {n} events of a slice")
        if n == 0:
            return
        per_event = (minute_ms, part.offsets, part.ids, part.event_times_ms, part.taken_ms)
        runs = (fact.fact_id, fact.node, fact.outcome, fact.reason, fact.status, fact.outcome_ms)
        runs_of_part = (*runs, part.topic, part.partition, epoch)
        touched: list[tuple[_Rows, int]] = []
        try:
            for hour, columns in _split_by_hour(minute_ms, per_event).items():
                rows = self._outcomes.get(dest, {}).get(hour)
                if rows is None:
                    rows = _new_rows(
                        self._outcomes, dest, hour, _OUTCOME_EVENT_FIELDS, len(runs_of_part)
                    )
                touched.append((rows, len(rows.columns[0])))
                for buffered, values in zip(rows.columns, columns, strict=True):
                    buffered.extend(values)
                rows.add_run(runs_of_part, len(columns[0]))
        except (TypeError, OverflowError):
            for rows, before in touched:
                rows.truncate(before)
            raise
        self._rows += n

    def minute(self, dest: str, row: Mapping[str, Any]) -> None:
        """Buffer one row of `minutes`; its keys are exactly `MINUTE_SCHEMA.names`."""
        if row.keys() != MINUTE_NAMES:
            missing, extra = MINUTE_NAMES - row.keys(), row.keys() - MINUTE_NAMES
            raise ValueError(f"minutes row: missing {sorted(missing)}, unknown {sorted(extra)}")
        hour = row["minute_ms"] // HOUR_MS
        rows = self._minutes.get(dest, {}).get(hour)
        if rows is None:
            rows = _new_rows(self._minutes, dest, hour, MINUTE_SCHEMA)
        before = len(rows.columns[0])
        try:
            for column, name in zip(rows.columns, MINUTE_SCHEMA.names, strict=True):
                column.append(row[name])
        except (TypeError, OverflowError):
            rows.truncate(before)
            raise
        self._rows += 1

    @property
    def buffered_rows(self) -> int:
        """Rows buffered since the last `take()`."""
        return self._rows

    def take(self) -> PendingFiles:
        """Everything buffered, to be written by `PendingFiles.write()`; the buffers start empty."""
        buffers = {
            Kind.ENTERED: self._entered,
            Kind.OUTCOMES: self._outcomes,
            Kind.MINUTES: self._minutes,
        }
        pending = PendingFiles(self.root, buffers, self._rows)
        self._entered, self._outcomes, self._minutes = {}, {}, {}
        self._rows = 0
        return pending


def _split_by_hour(
    minute_ms: Sequence[int], per_event: Sequence[Sequence[Any]]
) -> dict[int, Sequence[Sequence[Any]]]:
    """The columns of a slice's events per hour index: itself when all are of one hour."""
    first_hour = min(minute_ms) // HOUR_MS
    if first_hour == max(minute_ms) // HOUR_MS:
        return {first_hour: per_event}
    indices: dict[int, list[int]] = {}  # events of several hours: late, or retried for long
    for i, minute in enumerate(minute_ms):
        indices.setdefault(minute // HOUR_MS, []).append(i)
    return {
        hour: [[column[i] for i in picked] for column in per_event]
        for hour, picked in indices.items()
    }


def _new_rows(
    buffer: Buffer, dest: str, hour: int, fields: Sequence[Any], run_columns: int = 0
) -> _Rows:
    by_hour = buffer.get(dest)
    if by_hour is None:
        check_name("destination", dest)
        by_hour = buffer[dest] = {}
    rows = by_hour[hour] = _Rows(fields, run_columns)
    return rows


class PendingFiles:
    """Rows taken from an `Archive`, written as one file per (kind, dest, date, hour)."""

    def __init__(self, root: Path, buffers: dict[Kind, Buffer], rows: int) -> None:
        self.root = root
        self.rows = rows
        self._buffers = buffers
        self._written: dict[tuple[Kind, str, int], Path] = {}

    def write(self) -> list[Path]:
        """Write the files and return their paths; after an `ArchiveError`, call again to retry.

        A retry writes only the files not written yet, so no row is written twice.
        """
        for kind, by_dest in self._buffers.items():
            for dest, by_hour in by_dest.items():
                for hour, rows in by_hour.items():
                    if len(rows.columns[0]) and (kind, dest, hour) not in self._written:
                        table = _table(kind, dest, rows)
                        self._written[kind, dest, hour] = write_part(
                            self.root, kind, dest, hour, table
                        )
        self._buffers = {}
        return list(self._written.values())


def _table(kind: Kind, dest: str, rows: _Rows) -> Any:
    """The rows as a table of the kind's schema; runs are decoded in C, the rest converted."""
    schema = SCHEMAS[kind]
    columns, runs = iter(rows.columns), iter(rows.run_values)
    run_ends = pa.array(rows.run_ends, type=pa.int64())
    arrays = []
    try:
        for field in schema:
            if field.name in _RUNS.get(kind, ()):
                values = pa.array(next(runs), type=field.type)
                encoded = pa.RunEndEncodedArray.from_arrays(run_ends, values)
                arrays.append(pc.run_end_decode(encoded))
            else:
                arrays.append(_to_arrow(next(columns), field.type))
            if arrays[-1].null_count and not field.nullable:
                raise ValueError(f"column {field.name!r} holds nulls")
        return pa.Table.from_arrays(arrays, schema=schema)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise ArchiveError(f"archive: {kind} rows of destination {dest!r}: {why(exc)}") from exc
