"""Which records a backfill re-offers: every record in its range, or the origins listed in a missing-events file.

The reconciliation writes the events it found missing as Parquet (a file, or a directory of
them; names beginning with `_` or `.` are not read), one row per event:

    dest (string), minute_ms (int64), event_id (string, null when none), topic (string),
    partition (int32), offset (int64), event_time_ms (int64)

A backfill selects by origin (topic, partition, offset) the rows of its destination. A file
under a Hive partition directory `dest=NAME/` may leave the `dest` column out (as Spark's
`partitionBy("dest")` writes it). A file that is not Parquet or lacks a column (or has one of
another kind) is refused whole, naming the file, before anything is re-offered.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from aiokafka import TopicPartition

from hifi.errors import ConfigError

_STRING = "string"
_INTEGER = "integer"
COLUMNS: Mapping[str, str] = {
    "dest": _STRING,
    "minute_ms": _INTEGER,
    "event_id": _STRING,
    "topic": _STRING,
    "partition": _INTEGER,
    "offset": _INTEGER,
    "event_time_ms": _INTEGER,
}
_ORIGIN_COLUMNS = ("topic", "partition", "offset")
_FLAG = "--only-missing"


@dataclass(frozen=True, slots=True)
class Selection:
    """The records a backfill re-offers; `origins` None: every record in its range."""

    origins: Mapping[TopicPartition, frozenset[int]] | None
    digest: str  # names the selection in the checkpoint's identity
    source: str  # "all", or the missing-events path

    @classmethod
    def everything(cls) -> Selection:
        return cls(None, "all", "all")

    @property
    def listed(self) -> int | None:
        """How many origins the file lists for the destination (None: every record)."""
        return None if self.origins is None else sum(len(o) for o in self.origins.values())

    def wants(self, tp: TopicPartition, offset: int) -> bool:
        return self.origins is None or offset in self.origins.get(tp, ())

    def bounds(self, tp: TopicPartition) -> tuple[int, int] | None:
        """The offsets [first, last + 1) to read in `tp`; None: nothing to read there."""
        if self.origins is None:
            return (0, 2**63 - 1)
        offsets = self.origins.get(tp)
        return (min(offsets), max(offsets) + 1) if offsets else None


def read_missing(path: Path, dest: str) -> Selection:
    """The origins listed for `dest` in the missing-events Parquet file or directory `path`."""
    if not path.exists():
        raise ConfigError(f"{_FLAG} {path}: does not exist; give a Parquet file or directory")
    files = _files(path)
    origins: dict[TopicPartition, set[int]] = {}
    for file in files:
        for topic, partition, offset in _rows(file, dest):
            origins.setdefault(TopicPartition(topic, partition), set()).add(offset)
    frozen = {tp: frozenset(offsets) for tp, offsets in origins.items()}
    return Selection(frozen, _digest(frozen), str(path.resolve()))


def _files(path: Path) -> list[str]:
    """The Parquet files under `path` as pyarrow.dataset finds them (skipping `_*` and `.*`)."""
    try:
        # an empty schema: list the files without opening any, so a bad one is named below
        found = ds.dataset(str(path), format="parquet", schema=pa.schema([])).files
    except (pa.ArrowException, OSError) as exc:
        raise ConfigError(
            f"{_FLAG} {path}: cannot be read as Parquet: {_first_line(exc)}"
        ) from None
    if not found:
        raise ConfigError(f"{_FLAG} {path}: holds no Parquet files")
    return sorted(found)


def _rows(file: str, dest: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of the rows of `dest` in one file, its columns checked first."""
    path_dest = next((p[5:] for p in Path(file).parts if p.startswith("dest=")), None)
    try:
        dataset = ds.dataset(file, format="parquet")
        has_dest = _check_columns(file, dataset.schema, dest_in_path=path_dest is not None)
        if not has_dest and path_dest != dest:
            return []
        wanted = ds.field("dest") == pa.scalar(dest, pa.string()) if has_dest else None
        table = dataset.to_table(columns=list(_ORIGIN_COLUMNS), filter=wanted)
    except (pa.ArrowException, OSError) as exc:
        raise ConfigError(
            f"{_FLAG} {file}: not a readable Parquet file: {_first_line(exc)}"
        ) from None
    for name in _ORIGIN_COLUMNS:
        if table.column(name).null_count:
            raise ConfigError(
                f"{_FLAG} {file}: column {name!r} has nulls; every row needs an origin"
            )
    offsets = table.column("offset")
    if len(offsets) and pc.min(offsets).as_py() < 0:
        raise ConfigError(f"{_FLAG} {file}: column 'offset' has negative offsets")
    return list(
        zip(
            table.column("topic").to_pylist(),
            table.column("partition").to_pylist(),
            offsets.to_pylist(),
            strict=True,
        )
    )


def _check_columns(file: str, schema: pa.Schema, *, dest_in_path: bool) -> bool:
    """Every column is there with its kind (`dest` may be in the path instead); returns
    whether the file has a `dest` column."""
    for name, kind in COLUMNS.items():
        index = schema.get_field_index(name)
        if index < 0 and name == "dest" and dest_in_path:
            continue
        if index < 0:
            raise ConfigError(
                f"{_FLAG} {file}: no column {name!r}; a missing-events file has the columns"
                f" {', '.join(COLUMNS)}"
            )
        field_type = schema.field(index).type
        fits = (
            pa.types.is_string(field_type) or pa.types.is_large_string(field_type)
            if kind == _STRING
            else pa.types.is_integer(field_type)
        )
        if not fits:
            raise ConfigError(f"{_FLAG} {file}: column {name!r} is {field_type}, not {kind}")
    return "dest" in schema.names


def _digest(origins: Mapping[TopicPartition, frozenset[int]]) -> str:
    """A short hash of the selected origins: the same file contents, the same selection."""
    hasher = hashlib.sha256()
    for tp in sorted(origins, key=lambda t: (t.topic, t.partition)):
        hasher.update(f"{tp.topic}/{tp.partition}:".encode())
        hasher.update(",".join(map(str, sorted(origins[tp]))).encode())
        hasher.update(b";")
    return "missing:" + hasher.hexdigest()[:16]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
