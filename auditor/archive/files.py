"""The archive's files: written under a name readers skip, fsync'ed, renamed; settings and snapshots."""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from auditor.archive.read import read_settings
from hifi.accounting.archive_layout import (
    OUTCOME_RUNS,
    ArchiveError,
    Kind,
    check_name,
    partition_dir,
    why,
)

STALE_TEMP_S = 3600  # temporary files older than this are a crashed writer's, removed at start
# Columns with few distinct values are dictionary-encoded; on unique ids or clocks it would cost
# time and bytes.
DICTIONARY_COLUMNS: dict[Kind, list[str] | bool] = {
    Kind.ENTERED: ["minute_ms", "topic", "partition", "problem", "topic_epoch"],
    Kind.OUTCOMES: ["minute_ms", *OUTCOME_RUNS],
    Kind.MINUTES: True,
}


def write_part(root: Path, kind: Kind, dest: str, hour: int, table: Any) -> Path:
    directory = partition_dir(root, kind, dest, hour)
    first_minute_ms = pc.min(table["minute_ms"]).as_py()
    final = directory / f"part-{first_minute_ms}-{uuid.uuid4().hex[:8]}.parquet"
    _make_dirs(directory)
    _write_atomic(
        final,
        lambda temp: pq.write_table(
            table, str(temp), compression="zstd", use_dictionary=DICTIONARY_COLUMNS[kind]
        ),
    )
    return final


def _write_atomic(final: Path, fill: Callable[[Path], object]) -> None:
    """`fill` a temporary file readers skip, fsync it, rename it to `final`, fsync the dir.

    The temporary name is this writer's own: the members of an auditor group share an archive,
    and two writing the same file at once must not rename each other's."""
    temp = final.with_name(f".{final.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        fill(temp)
        _fsync(temp)
        os.replace(temp, final)
        _fsync(final.parent)
    except (OSError, pa.ArrowException) as exc:
        temp.unlink(missing_ok=True)
        raise ArchiveError(f"archive file {final}: cannot write it: {why(exc)}") from exc


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
        raise ArchiveError(f"archive directory {missing[0]}: cannot create it: {why(exc)}") from exc


def remove_stale_temp_files(root: Path, older_than_s: float) -> None:
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            if name.startswith(".") and name.endswith(".tmp"):
                try:
                    if path.stat().st_mtime < older_than_s:
                        path.unlink()
                except OSError:
                    pass  # gone meanwhile, or not ours to remove: readers skip it anyway


def write_settings(root: Path, dest: str, settings: Mapping[str, Any], *, now_ms: int) -> None:
    """Keep dest's accounting settings as a new version from `now_ms`, when they changed.

    A version applies from its `from_ms` until the next one's; versions are strictly ordered,
    so a clock that went back makes the new one apply from just after the latest.
    """
    check_name("destination", dest)
    try:
        current = msgspec.json.decode(orjson.dumps(dict(settings)), type=dict[str, Any])
    except (TypeError, ValueError) as exc:
        raise ArchiveError(f"archive: settings of {dest!r} are not JSON: {why(exc)}") from exc
    versions = read_settings(root, dest)
    if versions and versions[-1]["settings"] == current:
        return
    from_ms = max(now_ms, versions[-1]["from_ms"] + 1) if versions else now_ms
    doc = orjson.dumps({"from_ms": from_ms, "settings": current}, option=orjson.OPT_SORT_KEYS)
    directory = root / "settings" / f"dest={dest}"
    _make_dirs(directory)
    _write_atomic(directory / f"settings-{from_ms}.json", lambda temp: temp.write_bytes(doc))


def write_snapshot(root: Path, name: str, data: bytes) -> None:
    """Replace ROOT/_state/{name}.snapshot atomically (temporary file, fsync, rename)."""
    check_name("snapshot", name)
    directory = root / "_state"
    _make_dirs(directory)
    _write_atomic(directory / f"{name}.snapshot", lambda temp: temp.write_bytes(data))
