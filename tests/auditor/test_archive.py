"""The auditor's archive: Hive-partitioned Parquet written atomically, and its readers."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from auditor import archive
from auditor.archive import Archive, EnteredColumns, write_settings, write_snapshot
from auditor.archive.read import find_ids, read_minutes, read_settings, read_snapshot
from hifi.accounting import archive_layout, incarnations
from hifi.accounting.archive_layout import (
    ENTERED_SCHEMA,
    MINUTE_SCHEMA,
    OUTCOME_SCHEMA,
    ArchiveError,
)
from hifi.audit import FORMAT_MAJOR, FORMAT_MINOR, Fact, Slice
from hifi.errors import ConfigError

MINUTE_MS = 1_785_000_000_000 // 60_000 * 60_000  # 2026-07-25 17:20 UTC
HOUR_MS = 3_600_000


class _Crash(BaseException):
    """The process dying between two steps: no `except Exception` or cleanup runs."""


def _enter(arc: Archive, dest: str, minute_ms: int, offset: int, **extra: Any) -> None:
    row: dict[str, Any] = {
        "minute_ms": minute_ms,
        "topic": "orders",
        "partition": 3,
        "offset": offset,
        "event_id": f"id-{offset}",
        "event_time_ms": minute_ms + 5,
        "kafka_ms": minute_ms + 7,
        "observed_ms": minute_ms + 9,
        "problem": None,
    }
    row.update(extra)
    columns = EnteredColumns(
        [row["minute_ms"]],
        [row["offset"]],
        [row["event_id"]],
        [row["event_time_ms"]],
        [row["kafka_ms"]],
        [row["problem"]],
    )
    arc.entered_many(dest, row["topic"], row["partition"], row["observed_ms"], columns)


def _minute_row(minute_ms: int, written_ms: int, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(MINUTE_SCHEMA.names)
    row.update(
        minute_ms=minute_ms,
        entered=10,
        accepted=0,
        delivered=7,
        dead_lettered=2,
        dead_lettered_by_reason={"http_4xx": 1, "malformed": 1},
        filtered=0,
        in_retry=1,
        waiting=0,
        missing=0,
        duplicates=0,
        lag_p95_ms=250,
        final=True,
        up=True,
        written_ms=written_ms,
    )
    row.update(extra)
    return row


def _fact(outcome: str = "delivered", reason: str | None = None) -> Fact:
    part = Slice("orders", 3, [10, 11, 12], ["a", None, "c"], [1, 2, 3], [4, 0, 6])
    return Fact(
        FORMAT_MAJOR, FORMAT_MINOR, "f1", "shop", "connector@h:1", outcome, reason, 200, 99, [part]
    )


def _visible_rows(root: Path, kind: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = ds.dataset(root / kind, partitioning="hive").to_table().to_pylist()
    return rows


def test_entered_round_trip(tmp_path: Path) -> None:
    """Entered rows come back with every column as given, one file per destination and hour."""
    arc = Archive(tmp_path)
    _enter(arc, "shop", MINUTE_MS, 1)
    _enter(arc, "shop", MINUTE_MS + HOUR_MS, 2, event_id=None, problem="no_id")
    _enter(arc, "shop", MINUTE_MS, 3)
    _enter(arc, "books", MINUTE_MS, 4, problem="malformed")
    assert arc.buffered_rows == 4
    pending = arc.take()
    assert (pending.rows, arc.buffered_rows) == (4, 0)
    paths = pending.write()
    assert len(paths) == 3
    by_path = {p: pq.read_table(p) for p in paths}
    assert all(t.schema.equals(ENTERED_SCHEMA) for t in by_path.values())
    rows = sorted((r for t in by_path.values() for r in t.to_pylist()), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == [1, 2, 3, 4]
    assert rows[1] == {
        "minute_ms": MINUTE_MS + HOUR_MS,
        "topic": "orders",
        "partition": 3,
        "offset": 2,
        "event_id": None,
        "event_time_ms": MINUTE_MS + HOUR_MS + 5,
        "kafka_ms": MINUTE_MS + HOUR_MS + 7,
        "observed_ms": MINUTE_MS + HOUR_MS + 9,
        "problem": "no_id",
        "topic_epoch": 0,
    }
    assert rows[3]["problem"] == "malformed"


def test_layout_and_hive_partition_columns(tmp_path: Path) -> None:
    """Files sit under kind/dest=/date=/hour=/part-{first_minute}-{uuid8}.parquet; dataset sees the path columns."""
    arc = Archive(tmp_path)
    _enter(arc, "shop", MINUTE_MS + 60_000, 1)
    _enter(arc, "shop", MINUTE_MS, 2)
    (path,) = arc.take().write()
    relative = path.relative_to(tmp_path).as_posix()
    assert re.fullmatch(
        rf"entered/dest=shop/date=2026-07-25/hour=17/part-{MINUTE_MS}-[0-9a-f]{{8}}\.parquet",
        relative,
    ), relative
    rows = _visible_rows(tmp_path, "entered")
    assert {(r["dest"], r["date"], r["hour"]) for r in rows} == {("shop", "2026-07-25", 17)}
    assert sorted(r["offset"] for r in rows) == [1, 2]


def test_outcomes_round_trip(tmp_path: Path) -> None:
    """One outcome row per event of a slice, the fact's fields repeated on each."""
    arc = Archive(tmp_path)
    fact = _fact("dead_lettered", "http_4xx")
    arc.outcomes("shop", [MINUTE_MS, MINUTE_MS, MINUTE_MS + HOUR_MS], fact, fact.slices[0])
    assert arc.buffered_rows == 3
    paths = arc.take().write()
    assert len(paths) == 2
    table = pa.concat_tables(pq.read_table(p) for p in paths)
    assert table.schema.equals(OUTCOME_SCHEMA)
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    assert rows[1] == {
        "minute_ms": MINUTE_MS,
        "fact_id": "f1",
        "node": "connector@h:1",
        "outcome": "dead_lettered",
        "reason": "http_4xx",
        "status": 200,
        "outcome_ms": 99,
        "topic": "orders",
        "partition": 3,
        "offset": 11,
        "event_id": None,
        "event_time_ms": 2,
        "taken_ms": 0,
        "topic_epoch": 0,
    }
    assert [r["minute_ms"] for r in rows] == [MINUTE_MS, MINUTE_MS, MINUTE_MS + HOUR_MS]


def test_a_row_refused_halfway_leaves_no_trace(tmp_path: Path) -> None:
    """A row with a value of the wrong type raises at once and leaves the buffered columns aligned."""
    arc = Archive(tmp_path)
    _enter(arc, "shop", MINUTE_MS, 1)
    with pytest.raises(TypeError):
        _enter(arc, "shop", MINUTE_MS, "2")  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # the first row of its hour: no empty file either
        _enter(arc, "shop", MINUTE_MS + HOUR_MS, 1, partition=None)
    _enter(arc, "shop", MINUTE_MS, 3)
    arc.minute("shop", _minute_row(MINUTE_MS, 1))
    with pytest.raises(TypeError):
        arc.minute("shop", _minute_row(MINUTE_MS, 2, missing=None))
    fact = _fact()
    arc.outcomes("shop", [MINUTE_MS] * 3, fact, fact.slices[0])
    with pytest.raises(OverflowError):  # the first hour's events were buffered, then undone
        arc.outcomes("shop", [MINUTE_MS, MINUTE_MS, 2**70], fact, fact.slices[0])
    assert arc.buffered_rows == 6
    assert len(arc.take().write()) == 3
    assert sorted(r["offset"] for r in _visible_rows(tmp_path, "entered")) == [1, 3]
    assert [r["written_ms"] for r in _visible_rows(tmp_path, "minutes")] == [1]
    assert sorted(r["offset"] for r in _visible_rows(tmp_path, "outcomes")) == [10, 11, 12]


def test_outcomes_needs_one_minute_per_event(tmp_path: Path) -> None:
    """A minutes list shorter than the slice is refused before anything is buffered."""
    arc = Archive(tmp_path)
    fact = _fact()
    with pytest.raises(ValueError, match="2 minutes for the 3 events"):
        arc.outcomes("shop", [MINUTE_MS, MINUTE_MS], fact, fact.slices[0])
    assert arc.buffered_rows == 0


def test_minutes_round_trip_and_row_keys(tmp_path: Path) -> None:
    """A minutes row reads back whole, its map column as a dict; a row with wrong keys is refused."""
    arc = Archive(tmp_path)
    row = _minute_row(MINUTE_MS, 5, up=None, down_reason="late", lag_p99_ms=900)
    arc.minute("shop", row)
    with pytest.raises(ValueError, match=r"missing \['written_ms'\], unknown \['extra'\]"):
        arc.minute("shop", {**{k: v for k, v in row.items() if k != "written_ms"}, "extra": 1})
    arc.take().write()
    assert read_minutes(tmp_path, "shop", from_ms=None, to_ms=None) == [row]
    (seen,) = _visible_rows(tmp_path, "minutes")
    assert seen["dead_lettered_by_reason"] == [("http_4xx", 1), ("malformed", 1)]


def test_read_minutes_keeps_latest_written_and_respects_range(tmp_path: Path) -> None:
    """read_minutes returns the latest written_ms per minute of [from_ms, to_ms), sorted by minute."""
    arc = Archive(tmp_path)
    for minute in range(4):
        arc.minute("shop", _minute_row(MINUTE_MS + minute * HOUR_MS, 10, delivered=minute))
    arc.minute("other", _minute_row(MINUTE_MS + HOUR_MS, 99, delivered=99))
    arc.take().write()
    arc.minute("shop", _minute_row(MINUTE_MS + HOUR_MS, 20, delivered=100))
    arc.minute("shop", _minute_row(MINUTE_MS + 2 * HOUR_MS, 5, delivered=200))
    arc.take().write()
    rows = read_minutes(
        tmp_path, "shop", from_ms=MINUTE_MS + HOUR_MS, to_ms=MINUTE_MS + 3 * HOUR_MS
    )
    assert [(r["minute_ms"], r["delivered"], r["written_ms"]) for r in rows] == [
        (MINUTE_MS + HOUR_MS, 100, 20),
        (MINUTE_MS + 2 * HOUR_MS, 2, 10),
    ]
    everything = read_minutes(tmp_path, "shop", from_ms=None, to_ms=None)
    assert [r["delivered"] for r in everything] == [0, 100, 2, 3]
    assert read_minutes(tmp_path, "nobody", from_ms=None, to_ms=None) == []


def test_find_ids_resolves_only_requested_origins(tmp_path: Path) -> None:
    """find_ids maps each requested origin the archive holds to its id (None: no id), nothing else."""
    arc = Archive(tmp_path)
    for offset in range(10):
        _enter(arc, "shop", MINUTE_MS, offset, event_id=None if offset == 4 else f"id-{offset}")
        _enter(arc, "shop", MINUTE_MS, offset, partition=7, event_id=f"p7-{offset}")
    _enter(arc, "shop", MINUTE_MS + HOUR_MS, 50, event_id="later")
    _enter(arc, "books", MINUTE_MS, 2, event_id="books-2")
    arc.take().write()
    found = find_ids(
        tmp_path,
        "shop",
        {
            MINUTE_MS: {("orders", 3): [2, 4, 99], ("orders", 7): {5}},
            MINUTE_MS + HOUR_MS: {("orders", 3): [50]},
            MINUTE_MS + 5 * HOUR_MS: {("orders", 3): [1]},
        },
    )
    assert found == {
        ("orders", 3, 2): "id-2",
        ("orders", 3, 4): None,
        ("orders", 7, 5): "p7-5",
        ("orders", 3, 50): "later",
    }


def test_temp_files_are_ignored_by_readers(tmp_path: Path) -> None:
    """Temporary files (leading '.' or '_') are invisible to pyarrow.dataset and to the readers."""
    arc = Archive(tmp_path)
    arc.minute("shop", _minute_row(MINUTE_MS, 1))
    (path,) = arc.take().write()
    (path.parent / f".{path.name}.tmp").write_bytes(b"PAR1 half a file")
    (path.parent / "_SUCCESS").write_bytes(b"")
    assert len(read_minutes(tmp_path, "shop", from_ms=None, to_ms=None)) == 1
    assert len(_visible_rows(tmp_path, "minutes")) == 1


def test_crash_mid_write_leaves_no_visible_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after the temporary file is written, before the rename, leaves nothing readers see."""
    arc = Archive(tmp_path)
    _enter(arc, "shop", MINUTE_MS, 1)
    pending = arc.take()

    def crash(src: Any, dst: Any) -> None:
        raise _Crash

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(_Crash):
        pending.write()
    monkeypatch.undo()
    (temp,) = (tmp_path / "entered").rglob("*.tmp")
    assert temp.name.startswith(".part-")
    assert pq.read_table(temp).num_rows == 1  # complete, fsync'ed, but never renamed
    assert not list((tmp_path / "entered").rglob("*.parquet"))
    assert _visible_rows(tmp_path, "entered") == []
    assert find_ids(tmp_path, "shop", {MINUTE_MS: {("orders", 3): [1]}}) == {}

    Archive(tmp_path)  # a fresh temporary file is left: its writer may still be running
    assert temp.exists()
    an_hour_ago = temp.stat().st_mtime - archive.STALE_TEMP_S - 1
    os.utime(temp, (an_hour_ago, an_hour_ago))
    Archive(tmp_path)
    assert not temp.exists()


def test_write_error_names_file_and_retry_writes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed rename is an ArchiveError naming the file; write() again writes each row once."""
    arc = Archive(tmp_path)
    _enter(arc, "shop", MINUTE_MS, 1)
    _enter(arc, "shop", MINUTE_MS + HOUR_MS, 2)
    pending = arc.take()
    real_replace, calls = os.replace, []

    def full_disk_on_second(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk_on_second)
    with pytest.raises(ArchiveError) as caught:
        pending.write()
    message = str(caught.value)
    assert message.startswith(f"archive file {calls[1]}: cannot write it: No space left")
    assert "\n" not in message
    assert not list(tmp_path.rglob("*.tmp"))
    assert len(pending.write()) == 2
    assert sorted(r["offset"] for r in _visible_rows(tmp_path, "entered")) == [1, 2]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"this is not parquet at all", "not a readable Parquet file"),
        ("truncated", "not a readable Parquet file"),
        ("entered", "column 'entered' is missing, expected int64"),
    ],
)
def test_bad_archive_file_is_one_line_error_naming_it(
    tmp_path: Path, content: bytes | str, expected: str
) -> None:
    """A file that is not Parquet, is truncated or has another kind's schema: ArchiveError naming it."""
    arc = Archive(tmp_path)
    arc.minute("shop", _minute_row(MINUTE_MS, 1))
    (good,) = arc.take().write()
    bad = good.parent / "part-0-bad.parquet"
    if content == "truncated":
        bad.write_bytes(good.read_bytes()[:-20])
    elif content == "entered":
        _enter(arc, "shop", MINUTE_MS, 1)
        (entered_file,) = arc.take().write()
        bad.write_bytes(entered_file.read_bytes())
    else:
        assert isinstance(content, bytes)
        bad.write_bytes(content)
    with pytest.raises(ArchiveError) as caught:
        read_minutes(tmp_path, "shop", from_ms=None, to_ms=None)
    message = str(caught.value)
    assert message.startswith(f"archive file {bad}: {expected}")
    assert "\n" not in message
    skipped: list[Path] = []
    rows = read_minutes(tmp_path, "shop", from_ms=None, to_ms=None, bad_files=skipped)
    assert (len(rows), skipped) == (1, [bad])


def test_bad_entered_file_in_find_ids(tmp_path: Path) -> None:
    """find_ids reports a corrupt entered file by name, or skips it with bad_files."""
    arc = Archive(tmp_path)
    _enter(arc, "shop", MINUTE_MS, 1)
    (good,) = arc.take().write()
    bad = good.parent / "part-1-corrupt.parquet"
    bad.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    origins = {MINUTE_MS: {("orders", 3): [1]}}
    with pytest.raises(ArchiveError, match=re.escape(f"archive file {bad}: ")):
        find_ids(tmp_path, "shop", origins)
    skipped: list[Path] = []
    assert find_ids(tmp_path, "shop", origins, bad_files=skipped) == {("orders", 3, 1): "id-1"}
    assert skipped == [bad]


def test_stray_directory_is_named_or_skipped(tmp_path: Path) -> None:
    """A directory that is not date=YYYY-MM-DD or hour=HH is named in the error, or skipped."""
    arc = Archive(tmp_path)
    arc.minute("shop", _minute_row(MINUTE_MS, 1))
    (good,) = arc.take().write()
    stray = good.parent.parent / "hour=7"
    stray.mkdir()
    with pytest.raises(ArchiveError, match=f"^archive directory {stray}: not an hour=HH directory"):
        read_minutes(tmp_path, "shop", from_ms=None, to_ms=None)
    skipped: list[Path] = []
    assert len(read_minutes(tmp_path, "shop", from_ms=None, to_ms=None, bad_files=skipped)) == 1
    assert skipped == [stray]


def test_null_in_a_required_column_names_it(tmp_path: Path) -> None:
    """A null where the schema allows none is refused: a poll's own values at once, an outcome's
    when written, with the column named, never as a bad file."""
    arc = Archive(tmp_path)
    with pytest.raises(TypeError, match="entered rows of None/3"):
        _enter(arc, "shop", MINUTE_MS, 1, topic=None)
    assert arc.buffered_rows == 0
    fact = _fact()
    fact.node = None  # type: ignore[assignment]
    arc.outcomes("shop", [MINUTE_MS] * 3, fact, fact.slices[0])
    with pytest.raises(ArchiveError, match="outcomes rows of destination 'shop': column 'node'"):
        arc.take().write()
    assert not list(tmp_path.rglob("*.parquet*"))


def test_timestamps_outside_partition_years_are_clamped(tmp_path: Path) -> None:
    """A minute before 1970 or after 9999 lands in the first or last hour and keeps its value."""
    arc = Archive(tmp_path)
    _enter(arc, "shop", -120_000, 1)
    _enter(arc, "shop", archive_layout.MAX_MS + 10 * HOUR_MS, 2)
    paths = arc.take().write()
    assert sorted(p.parent.relative_to(tmp_path).as_posix() for p in paths) == [
        "entered/dest=shop/date=1970-01-01/hour=00",
        "entered/dest=shop/date=9999-12-31/hour=23",
    ]
    minutes = sorted(r["minute_ms"] for r in _visible_rows(tmp_path, "entered"))
    assert minutes == [-120_000, archive_layout.MAX_MS + 10 * HOUR_MS]
    assert find_ids(tmp_path, "shop", {-120_000: {("orders", 3): [1]}}) == {
        ("orders", 3, 1): "id-1"
    }


def test_settings_are_versioned_only_when_changed(tmp_path: Path) -> None:
    """Each change of settings is a new version from its time; unchanged settings add nothing."""
    write_settings(tmp_path, "shop", {"settle_s": 300.0, "lag_sla_s": 1.0}, now_ms=1_000)
    write_settings(tmp_path, "shop", {"lag_sla_s": 1.0, "settle_s": 300.0}, now_ms=2_000)
    write_settings(tmp_path, "shop", {"settle_s": 60.0, "lag_sla_s": 1.0}, now_ms=3_000)
    write_settings(tmp_path, "shop", {"settle_s": 30.0, "lag_sla_s": 1.0}, now_ms=2_500)
    assert read_settings(tmp_path, "shop") == [
        {"from_ms": 1_000, "settings": {"lag_sla_s": 1.0, "settle_s": 300.0}},
        {"from_ms": 3_000, "settings": {"lag_sla_s": 1.0, "settle_s": 60.0}},
        {"from_ms": 3_001, "settings": {"lag_sla_s": 1.0, "settle_s": 30.0}},
    ]
    assert read_settings(tmp_path, "books") == []
    assert not list(tmp_path.rglob("*.tmp"))
    with pytest.raises(ArchiveError, match="settings of 'shop' are not JSON"):
        write_settings(tmp_path, "shop", {"when": object()}, now_ms=4_000)


def test_snapshot_round_trip_is_atomic(tmp_path: Path) -> None:
    """A snapshot is replaced whole, leaves no temporary file, and reads back; a missing one is None."""
    assert read_snapshot(tmp_path, "auditor") is None
    write_snapshot(tmp_path, "auditor", b"first")
    write_snapshot(tmp_path, "auditor", b"\x00second")
    assert read_snapshot(tmp_path, "auditor") == b"\x00second"
    assert [p.name for p in (tmp_path / "_state").iterdir()] == ["auditor.snapshot"]
    with pytest.raises(ArchiveError, match=re.escape("snapshot name '../x' is invalid")):
        write_snapshot(tmp_path, "../x", b"")


def test_root_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    """--archive naming a file, or a path under one, is a one-line ConfigError."""
    afile = tmp_path / "archive"
    afile.write_text("")
    with pytest.raises(ConfigError, match=f"^--archive {afile}: is a file, not a directory$"):
        Archive(afile)
    with pytest.raises(ConfigError, match=f"^--archive {afile}/sub: cannot create it: "):
        Archive(afile / "sub")


def test_invalid_destination_name_is_refused(tmp_path: Path) -> None:
    """A destination name that could escape its folder is refused when first buffered."""
    arc = Archive(tmp_path)
    with pytest.raises(ArchiveError, match=re.escape("destination name '../etc' is invalid")):
        _enter(arc, "../etc", MINUTE_MS, 1)


def test_files_without_topic_epoch_read_as_the_first_incarnation(tmp_path: Path) -> None:
    """An `entered` file written before `topic_epoch` existed names its ids as epoch 0; a new
    file's rows of epoch 1 are found only under the epoch's key."""
    old_schema = pa.schema([f for f in ENTERED_SCHEMA if f.name != "topic_epoch"])
    directory = archive_layout.partition_dir(
        tmp_path, archive_layout.Kind.ENTERED, "shop", MINUTE_MS // HOUR_MS
    )
    directory.mkdir(parents=True)
    old = {
        "minute_ms": [MINUTE_MS],
        "topic": ["orders"],
        "partition": [0],
        "offset": [5],
        "event_id": ["old-5"],
        "event_time_ms": [MINUTE_MS],
        "kafka_ms": [MINUTE_MS],
        "observed_ms": [MINUTE_MS],
        "problem": [None],
    }
    pq.write_table(pa.table(old, schema=old_schema), directory / f"part-{MINUTE_MS}-old.parquet")
    arc = Archive(tmp_path)
    columns = EnteredColumns([MINUTE_MS], [5], ["new-5"], [MINUTE_MS], [MINUTE_MS], [None])
    arc.entered_many("shop", "orders", 0, MINUTE_MS, columns, epoch=1)
    arc.take().write()
    first = find_ids(tmp_path, "shop", {MINUTE_MS: {("orders", 0): [5]}})
    second = find_ids(tmp_path, "shop", {MINUTE_MS: {(incarnations.key("orders", 1), 0): [5]}})
    assert first == {("orders", 0, 5): "old-5"}
    assert second == {(incarnations.key("orders", 1), 0, 5): "new-5"}


def test_minutes_files_of_schema_1_read_with_no_accepted_events(tmp_path: Path) -> None:
    """A `minutes` file written before schema 2 (no `accepted` column, no version in its
    metadata) reads with `accepted` 0 beside a new file's row, and without schema 3's
    `waiting` as 0 too; new files say schema 3."""
    later = ("accepted", "waiting")
    old_schema = pa.schema([f for f in MINUTE_SCHEMA if f.name not in later])
    directory = archive_layout.partition_dir(
        tmp_path, archive_layout.Kind.MINUTES, "shop", MINUTE_MS // HOUR_MS
    )
    directory.mkdir(parents=True)
    old_row = {k: v for k, v in _minute_row(MINUTE_MS, 5).items() if k not in later}
    old = pa.Table.from_pylist([old_row], schema=old_schema)
    pq.write_table(old, directory / f"part-{MINUTE_MS}-old.parquet")
    arc = Archive(tmp_path)
    arc.minute("shop", _minute_row(MINUTE_MS + 60_000, 6, accepted=12, waiting=3))
    arc.take().write()
    rows = read_minutes(tmp_path, "shop", from_ms=None, to_ms=None)
    assert [(r["minute_ms"], r["accepted"], r["waiting"]) for r in rows] == [
        (MINUTE_MS, 0, 0),
        (MINUTE_MS + 60_000, 12, 3),
    ]
    (new_file,) = (p for p in directory.iterdir() if not p.name.endswith("-old.parquet"))
    metadata = pq.read_schema(new_file).metadata
    assert metadata[archive_layout.SCHEMA_KEY] == str(archive_layout.SCHEMA_VERSION).encode()
    assert archive_layout.SCHEMA_VERSION == 3
