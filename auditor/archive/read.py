"""Reading the auditor's archive: minute rows, ids of events, settings versions, the snapshot.

Readers skip what a crashed writer leaves (temporary files) and, where asked, list the files
they could not read instead of failing on them. Errors are `ArchiveError`s naming the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hifi.accounting.archive_layout import (
    EPOCH,
    ID_COLUMNS,
    LATER_COLUMNS,
    MINUTE_SCHEMA,
    SCHEMAS,
    ArchiveError,
    Kind,
    check_name,
    hour_of,
    partition_dir,
    visible,
    why,
)
from hifi.accounting.incarnations import split


def _parquet_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if visible(p) and p.name.endswith(".parquet"))


def _hour_dirs(base: Path, first_hour: int, last_hour: int, bad: list[Path] | None) -> list[Path]:
    """The `date=/hour=` directories under `base` whose hour index is in [first, last]."""
    found: list[Path] = []
    for date_dir in sorted(p for p in base.iterdir() if visible(p)) if base.is_dir() else []:
        try:
            day = (
                datetime.strptime(date_dir.name, "date=%Y-%m-%d").replace(tzinfo=UTC) - EPOCH
            ).days
        except ValueError:
            day = None
        if day is None or not date_dir.is_dir():
            _bad(bad, date_dir, "not a date=YYYY-MM-DD directory")
            continue
        if not (first_hour <= day * 24 + 23 and day * 24 <= last_hour):
            continue
        for hour_dir in sorted(p for p in date_dir.iterdir() if visible(p)):
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
    """`columns` of the rows with `from_ms <= minute_ms < to_ms`, skipping row groups by stats;
    a column older files do not have (`LATER_COLUMNS`) reads as its value for them."""
    expected = SCHEMAS[kind]
    later: list[str] = []
    try:
        with pq.ParquetFile(path) as parquet:
            found = parquet.schema_arrow
            for name in columns:
                i = found.get_field_index(name)
                if i < 0 and name in LATER_COLUMNS:
                    later.append(name)
                    continue
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
            table = parquet.read_row_groups(groups, columns=[c for c in columns if c not in later])
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(
            f"archive file {path}: not a readable Parquet file ({why(exc)}); move it out of"
            " the archive"
        ) from exc
    for name in later:
        value = pa.array([LATER_COLUMNS[name]] * table.num_rows, expected.field(name).type)
        table = table.add_column(columns.index(name), expected.field(name), value)
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
    check_name("destination", dest)
    low = -(2**63) if from_ms is None else from_ms
    high = 2**63 - 1 if to_ms is None else to_ms
    if low >= high:
        return []
    base = root / Kind.MINUTES / f"dest={dest}"
    latest: dict[int, dict[str, Any]] = {}
    for hour_dir in _hour_dirs(base, hour_of(low), hour_of(high - 1), bad_files):
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
    """Event ids of `entered` rows: minute_ms -> (topic, partition) -> offsets, the topic as
    the ledgers key it (`hifi.accounting.incarnations.key`: with its epoch after the first).

    Reads only the files of those minutes' date/hour partitions; an origin the archive does
    not hold is absent from the result, one without a readable id maps to None.
    """
    check_name("destination", dest)
    wanted: dict[int, dict[int, dict[tuple[str, int], set[int]]]] = {}  # hour -> minute -> ...
    for minute_ms, parts in origins.items():
        by_part = wanted.setdefault(hour_of(minute_ms), {}).setdefault(minute_ms, {})
        for key, offsets in parts.items():
            by_part.setdefault(key, set()).update(offsets)
    found: dict[tuple[str, int, int], str | None] = {}
    for hour, minutes in sorted(wanted.items()):
        for path in _parquet_files(partition_dir(root, Kind.ENTERED, dest, hour)):
            try:
                table = _read_file(path, Kind.ENTERED, ID_COLUMNS, min(minutes), max(minutes) + 1)
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
        for (keyed, partition), offsets in parts.items():
            topic, epoch = split(keyed)
            mask = pc.and_(
                pc.and_(pc.equal(rows["topic"], topic), pc.equal(rows["partition"], partition)),
                pc.and_(
                    pc.equal(rows["topic_epoch"], epoch),
                    pc.is_in(rows["offset"], value_set=pa.array(list(offsets), type=pa.int64())),
                ),
            )
            hits = rows.filter(mask)
            for offset, event_id in zip(
                hits["offset"].to_pylist(), hits["event_id"].to_pylist(), strict=True
            ):
                yield (keyed, partition, offset), event_id


def read_settings(root: Path, dest: str) -> list[dict[str, Any]]:
    """Every version of dest's settings, `{"from_ms": int, "settings": {...}}`, oldest first."""
    check_name("destination", dest)
    directory = root / "settings" / f"dest={dest}"
    if not directory.is_dir():
        return []
    versions: list[dict[str, Any]] = []
    for path in sorted(p for p in directory.iterdir() if visible(p) and p.suffix == ".json"):
        try:
            doc = msgspec.json.decode(path.read_bytes())
        except (OSError, msgspec.DecodeError) as exc:
            raise ArchiveError(f"archive file {path}: cannot read it: {why(exc)}") from exc
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("from_ms"), int)
            and isinstance(doc.get("settings"), dict)
        ):
            raise ArchiveError(f"archive file {path}: not a settings version (from_ms, settings)")
        versions.append(doc)
    return sorted(versions, key=lambda version: int(version["from_ms"]))


def read_snapshot(root: Path, name: str) -> bytes | None:
    """The bytes of the latest snapshot `name`, or None when there is none."""
    check_name("snapshot", name)
    path = root / "_state" / f"{name}.snapshot"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ArchiveError(f"archive file {path}: cannot read it: {why(exc)}") from exc
