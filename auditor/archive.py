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
import json
import os
import re
import tempfile
import time
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hifi.audit import Fact, Slice
from hifi.errors import ConfigError, HifiError

HOUR_MS = 3_600_000
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant a partition can name
STALE_TEMP_S = 3600  # temporary files older than this are a crashed writer's, removed at start
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$")  # as config.catalog's dest names


class Kind(StrEnum):
    """The kinds of rows, each a folder of ROOT."""

    #: one row per record the auditor saw entering a source topic
    ENTERED = "entered"
    #: one row per event per audit fact
    OUTCOMES = "outcomes"
    #: one row per destination minute each time the auditor writes its table row
    MINUTES = "minutes"


def _schema(*fields: tuple[str, Any, bool]) -> Any:
    return pa.schema([pa.field(name, type_, nullable=null) for name, type_, null in fields])


_I32, _I64, _STR, _BOOL = pa.int32(), pa.int64(), pa.string(), pa.bool_()
ENTERED_SCHEMA = _schema(
    ("minute_ms", _I64, False), ("topic", _STR, False), ("partition", _I32, False),
    ("offset", _I64, False), ("event_id", _STR, True), ("event_time_ms", _I64, False),
    ("kafka_ms", _I64, False), ("observed_ms", _I64, False), ("problem", _STR, True),
)  # fmt: skip
OUTCOME_SCHEMA = _schema(
    ("minute_ms", _I64, False), ("fact_id", _STR, False), ("node", _STR, False),
    ("outcome", _STR, False), ("reason", _STR, True), ("status", _I32, True),
    ("outcome_ms", _I64, False), ("topic", _STR, False), ("partition", _I32, False),
    ("offset", _I64, False), ("event_id", _STR, True), ("event_time_ms", _I64, False),
    ("taken_ms", _I64, False),
)  # fmt: skip
MINUTE_SCHEMA = _schema(
    ("minute_ms", _I64, False), ("entered", _I64, False), ("delivered", _I64, False),
    ("dead_lettered", _I64, False),
    ("dead_lettered_by_reason", pa.map_(_STR, _I64), False),
    ("filtered", _I64, False), ("in_retry", _I64, False), ("missing", _I64, False),
    ("duplicates", _I64, False), ("lag_p50_ms", _I64, True), ("lag_p95_ms", _I64, True),
    ("lag_p99_ms", _I64, True), ("lag_in_p95_ms", _I64, True), ("process_p95_ms", _I64, True),
    ("final", _BOOL, False), ("up", _BOOL, True), ("down_reason", _STR, True),
    ("written_ms", _I64, False), ("missing_ids", pa.list_(_STR), True),
)  # fmt: skip
SCHEMAS: dict[Kind, Any] = {
    Kind.ENTERED: ENTERED_SCHEMA,
    Kind.OUTCOMES: OUTCOME_SCHEMA,
    Kind.MINUTES: MINUTE_SCHEMA,
}
_MINUTE_NAMES = frozenset(MINUTE_SCHEMA.names)
_ID_COLUMNS = ["minute_ms", "topic", "partition", "offset", "event_id"]
# Outcome columns that repeat a fact's or a slice's value for each of its events: buffered once
# per slice as runs (few list appends, and decoding runs is ~50x faster than converting lists).
_OUTCOME_RUNS = (
    "fact_id",
    "node",
    "outcome",
    "reason",
    "status",
    "outcome_ms",
    "topic",
    "partition",
)
# Columns with few distinct values are dictionary-encoded; trying it on unique ids or clocks
# costs time and bytes (3 M synthetic entered rows: a third faster to write, a quarter smaller).
_DICTIONARY: dict[Kind, list[str] | bool] = {
    Kind.ENTERED: ["minute_ms", "topic", "partition", "problem"],
    Kind.OUTCOMES: ["minute_ms", *_OUTCOME_RUNS],
    Kind.MINUTES: True,
}


_ARRAY_CODES = {pa.int64(): "q", pa.int32(): "i"}  # array type codes of the same width
_OUTCOME_EVENT_FIELDS = [field for field in OUTCOME_SCHEMA if field.name not in _OUTCOME_RUNS]
# Entered columns that repeat one poll's value for each of its records: runs, as for outcomes.
_ENTERED_RUNS = ("topic", "partition", "observed_ms")
_ENTERED_EVENT_FIELDS = [field for field in ENTERED_SCHEMA if field.name not in _ENTERED_RUNS]
_RUNS: dict[Kind, tuple[str, ...]] = {Kind.ENTERED: _ENTERED_RUNS, Kind.OUTCOMES: _OUTCOME_RUNS}


@dataclass(slots=True)
class EnteredColumns:
    """The `entered` rows of one poll of one partition, as columns of equal length."""

    minutes_ms: list[int]
    offsets: list[int]
    ids: list[str | None]
    event_times_ms: list[int]
    kafka_ms: list[int]
    problems: list[str | None]


class ArchiveError(HifiError):
    """An archive file or directory that cannot be written or read; the message names it."""


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
            raise ConfigError(f"--archive {root}: cannot create it: {_why(exc)}") from None
        try:
            fd, probe = tempfile.mkstemp(dir=root, prefix=".probe-", suffix=".tmp")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(f"--archive {root}: not writable: {_why(exc)}") from None
        self.root = root
        _remove_stale_temp_files(root, time.time() - STALE_TEMP_S)
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
    ) -> None:
        """Buffer the `entered` rows of one poll of one partition, a column at a time."""
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
                rows.add_run((topic, partition, observed_ms), len(minutes))
        except (TypeError, OverflowError):
            for rows, before in touched:
                rows.truncate(before)
            raise
        self._rows += n

    def outcomes(self, dest: str, minute_ms: Sequence[int], fact: Fact, part: Slice) -> None:
        """Buffer one row of `outcomes` per event of `part`; `minute_ms[i]` is event i's minute."""
        n = len(part.offsets)
        if len(minute_ms) != n:
            raise ValueError(f"{len(minute_ms)} minutes for the {n} events of a slice")
        if n == 0:
            return
        per_event = (minute_ms, part.offsets, part.ids, part.event_times_ms, part.taken_ms)
        runs = (fact.fact_id, fact.node, fact.outcome, fact.reason, fact.status, fact.outcome_ms)
        runs_of_part = (*runs, part.topic, part.partition)
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
        if row.keys() != _MINUTE_NAMES:
            missing, extra = _MINUTE_NAMES - row.keys(), row.keys() - _MINUTE_NAMES
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
        _check_name("destination", dest)
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
                        self._written[kind, dest, hour] = _write_part(
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
        raise ArchiveError(f"archive: {kind} rows of destination {dest!r}: {_why(exc)}") from exc


def _partition_dir(root: Path, kind: Kind, dest: str, hour: int) -> Path:
    """The directory of an hour index, clamped to 1970-01-01 00 .. 9999-12-31 23."""
    at = _EPOCH + timedelta(hours=min(max(hour, 0), MAX_MS // HOUR_MS))
    return root / kind / f"dest={dest}" / f"date={at:%Y-%m-%d}" / f"hour={at:%H}"


def _hour_of(minute_ms: int) -> int:
    return min(max(minute_ms, 0), MAX_MS) // HOUR_MS


def _write_part(root: Path, kind: Kind, dest: str, hour: int, table: Any) -> Path:
    directory = _partition_dir(root, kind, dest, hour)
    first_minute_ms = pc.min(table["minute_ms"]).as_py()
    final = directory / f"part-{first_minute_ms}-{uuid.uuid4().hex[:8]}.parquet"
    _make_dirs(directory)
    _write_atomic(
        final,
        lambda temp: pq.write_table(
            table, str(temp), compression="zstd", use_dictionary=_DICTIONARY[kind]
        ),
    )
    return final


def _write_atomic(final: Path, fill: Callable[[Path], object]) -> None:
    """`fill` a temporary file readers skip, fsync it, rename it to `final`, fsync the dir."""
    temp = final.with_name(f".{final.name}.tmp")
    try:
        fill(temp)
        _fsync(temp)
        os.replace(temp, final)
        _fsync(final.parent)
    except (OSError, pa.ArrowException) as exc:
        temp.unlink(missing_ok=True)
        raise ArchiveError(f"archive file {final}: cannot write it: {_why(exc)}") from exc


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(directory: Path) -> None:
    """Create `directory` and its missing parents, fsyncing each parent so the entry is durable."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    try:
        for created in reversed(missing):
            created.mkdir(exist_ok=True)
            _fsync(created.parent)
    except OSError as exc:
        raise ArchiveError(
            f"archive directory {missing[0]}: cannot create it: {_why(exc)}"
        ) from exc


def _remove_stale_temp_files(root: Path, older_than_s: float) -> None:
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            if name.startswith(".") and name.endswith(".tmp"):
                try:
                    if path.stat().st_mtime < older_than_s:
                        path.unlink()
                except OSError:
                    pass  # gone meanwhile, or not ours to remove: readers skip it anyway


def _why(exc: BaseException) -> str:
    """The first line of an exception's message: errors stay one line."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _check_name(what: str, name: str) -> None:
    if not _NAME_RE.match(name):
        raise ArchiveError(f"archive: {what} name {name!r} is invalid; use letters, digits, . _ -")


def _visible(path: Path) -> bool:
    return not path.name.startswith((".", "_"))


def _parquet_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _visible(p) and p.name.endswith(".parquet"))


def _hour_dirs(base: Path, first_hour: int, last_hour: int, bad: list[Path] | None) -> list[Path]:
    """The `date=/hour=` directories under `base` whose hour index is in [first, last]."""
    found: list[Path] = []
    for date_dir in sorted(p for p in base.iterdir() if _visible(p)) if base.is_dir() else []:
        try:
            day = (
                datetime.strptime(date_dir.name, "date=%Y-%m-%d").replace(tzinfo=UTC) - _EPOCH
            ).days
        except ValueError:
            day = None
        if day is None or not date_dir.is_dir():
            _bad(bad, date_dir, "not a date=YYYY-MM-DD directory")
            continue
        if not (first_hour <= day * 24 + 23 and day * 24 <= last_hour):
            continue
        for hour_dir in sorted(p for p in date_dir.iterdir() if _visible(p)):
            hh = hour_dir.name.removeprefix("hour=")
            if not (hh.isdigit() and len(hh) == 2 and int(hh) < 24 and hour_dir.is_dir()):
                _bad(bad, hour_dir, "not an hour=HH directory")
            elif first_hour <= day * 24 + int(hh) <= last_hour:
                found.append(hour_dir)
    return found


def _bad(bad: list[Path] | None, path: Path, why: str) -> None:
    if bad is None:
        raise ArchiveError(f"archive directory {path}: {why}; move it out of the archive")
    bad.append(path)


def _read_file(path: Path, kind: Kind, columns: list[str], from_ms: int, to_ms: int) -> Any:
    """`columns` of the rows with `from_ms <= minute_ms < to_ms`, skipping row groups by stats."""
    expected = SCHEMAS[kind]
    try:
        with pq.ParquetFile(path) as parquet:
            found = parquet.schema_arrow
            for name in columns:
                i = found.get_field_index(name)
                want = expected.field(name).type
                if i < 0 or not found.field(i).type.equals(want):
                    got = "missing" if i < 0 else f"{found.field(i).type}"
                    raise ArchiveError(
                        f"archive file {path}: column {name!r} is {got}, expected {want}"
                        f" (not a file of '{kind}'); move it out of the archive"
                    )
            groups = [
                i
                for i in range(parquet.num_row_groups)
                if _may_hold(parquet.metadata.row_group(i), from_ms, to_ms)
            ]
            table = parquet.read_row_groups(groups, columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(
            f"archive file {path}: not a readable Parquet file ({_why(exc)}); move it out of"
            " the archive"
        ) from exc
    minute = table["minute_ms"]
    return table.filter(pc.and_(pc.greater_equal(minute, from_ms), pc.less(minute, to_ms)))


def _may_hold(group: Any, from_ms: int, to_ms: int) -> bool:
    for j in range(group.num_columns):
        column = group.column(j)
        if column.path_in_schema == "minute_ms":
            stats = column.statistics
            if stats is not None and stats.has_min_max:
                return bool(stats.min < to_ms and stats.max >= from_ms)
    return True


def read_minutes(
    root: Path,
    dest: str,
    *,
    from_ms: int | None,
    to_ms: int | None,
    bad_files: list[Path] | None = None,
) -> list[dict[str, Any]]:
    """`minutes` rows of dest in [from_ms, to_ms), the latest `written_ms` per minute, by minute.

    With `bad_files`, unreadable files are appended to it and skipped instead of raising.
    """
    _check_name("destination", dest)
    low = -(2**63) if from_ms is None else from_ms
    high = 2**63 - 1 if to_ms is None else to_ms
    if low >= high:
        return []
    base = root / Kind.MINUTES / f"dest={dest}"
    latest: dict[int, dict[str, Any]] = {}
    for hour_dir in _hour_dirs(base, _hour_of(low), _hour_of(high - 1), bad_files):
        for path in _parquet_files(hour_dir):
            try:
                table = _read_file(path, Kind.MINUTES, MINUTE_SCHEMA.names, low, high)
            except ArchiveError:
                if bad_files is None:
                    raise
                bad_files.append(path)
                continue
            for row in table.to_pylist(maps_as_pydicts="strict"):
                seen = latest.get(row["minute_ms"])
                if seen is None or row["written_ms"] >= seen["written_ms"]:
                    latest[row["minute_ms"]] = row
    return [latest[minute] for minute in sorted(latest)]


def find_ids(
    root: Path,
    dest: str,
    origins: Mapping[int, Mapping[tuple[str, int], Iterable[int]]],
    *,
    bad_files: list[Path] | None = None,
) -> dict[tuple[str, int, int], str | None]:
    """Event ids of `entered` rows: minute_ms -> (topic, partition) -> offsets.

    Reads only the files of those minutes' date/hour partitions; an origin the archive does
    not hold is absent from the result, one without a readable id maps to None.
    """
    _check_name("destination", dest)
    wanted: dict[int, dict[int, dict[tuple[str, int], set[int]]]] = {}  # hour -> minute -> ...
    for minute_ms, parts in origins.items():
        by_part = wanted.setdefault(_hour_of(minute_ms), {}).setdefault(minute_ms, {})
        for key, offsets in parts.items():
            by_part.setdefault(key, set()).update(offsets)
    found: dict[tuple[str, int, int], str | None] = {}
    for hour, minutes in sorted(wanted.items()):
        for path in _parquet_files(_partition_dir(root, Kind.ENTERED, dest, hour)):
            try:
                table = _read_file(path, Kind.ENTERED, _ID_COLUMNS, min(minutes), max(minutes) + 1)
            except ArchiveError:
                if bad_files is None:
                    raise
                bad_files.append(path)
                continue
            found.update(_matching_ids(table, minutes))
    return found


def _matching_ids(
    table: Any, minutes: Mapping[int, Mapping[tuple[str, int], set[int]]]
) -> Iterator[tuple[tuple[str, int, int], str | None]]:
    for minute_ms, parts in minutes.items():
        rows = table.filter(pc.equal(table["minute_ms"], minute_ms))
        for (topic, partition), offsets in parts.items():
            mask = pc.and_(
                pc.and_(pc.equal(rows["topic"], topic), pc.equal(rows["partition"], partition)),
                pc.is_in(rows["offset"], value_set=pa.array(list(offsets), type=pa.int64())),
            )
            hits = rows.filter(mask)
            for offset, event_id in zip(
                hits["offset"].to_pylist(), hits["event_id"].to_pylist(), strict=True
            ):
                yield (topic, partition, offset), event_id


def write_settings(root: Path, dest: str, settings: Mapping[str, Any], *, now_ms: int) -> None:
    """Keep dest's accounting settings as a new version from `now_ms`, when they changed.

    A version applies from its `from_ms` until the next one's; versions are strictly ordered,
    so a clock that went back makes the new one apply from just after the latest.
    """
    _check_name("destination", dest)
    try:
        current = json.loads(json.dumps(dict(settings), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise ArchiveError(f"archive: settings of {dest!r} are not JSON: {_why(exc)}") from exc
    versions = read_settings(root, dest)
    if versions and versions[-1]["settings"] == current:
        return
    from_ms = max(now_ms, versions[-1]["from_ms"] + 1) if versions else now_ms
    doc = json.dumps({"from_ms": from_ms, "settings": current}, sort_keys=True).encode()
    directory = root / "settings" / f"dest={dest}"
    _make_dirs(directory)
    _write_atomic(directory / f"settings-{from_ms}.json", lambda temp: temp.write_bytes(doc))


def read_settings(root: Path, dest: str) -> list[dict[str, Any]]:
    """Every version of dest's settings, `{"from_ms": int, "settings": {...}}`, oldest first."""
    _check_name("destination", dest)
    directory = root / "settings" / f"dest={dest}"
    if not directory.is_dir():
        return []
    versions: list[dict[str, Any]] = []
    for path in sorted(p for p in directory.iterdir() if _visible(p) and p.suffix == ".json"):
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise ArchiveError(f"archive file {path}: cannot read it: {_why(exc)}") from exc
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("from_ms"), int)
            and isinstance(doc.get("settings"), dict)
        ):
            raise ArchiveError(f"archive file {path}: not a settings version (from_ms, settings)")
        versions.append(doc)
    return sorted(versions, key=lambda version: int(version["from_ms"]))


def write_snapshot(root: Path, name: str, data: bytes) -> None:
    """Replace ROOT/_state/{name}.snapshot atomically (temporary file, fsync, rename)."""
    _check_name("snapshot", name)
    directory = root / "_state"
    _make_dirs(directory)
    _write_atomic(directory / f"{name}.snapshot", lambda temp: temp.write_bytes(data))


def read_snapshot(root: Path, name: str) -> bytes | None:
    """The bytes of the latest snapshot `name`, or None when there is none."""
    _check_name("snapshot", name)
    path = root / "_state" / f"{name}.snapshot"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ArchiveError(f"archive file {path}: cannot read it: {_why(exc)}") from exc
