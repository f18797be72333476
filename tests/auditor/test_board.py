"""The board's format: distributions posted packed, an open minute packed again only after a
delivery, and the files of an earlier release (format 1, lists) read beside this one's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from aiokafka import TopicPartition

from auditor.board import post, read_board
from auditor.merged import KEEP_POSTED_MS, LET_GO, DestinationView, share_entry
from auditor.share_rows import distributions, share_row
from hifi.accounting.buckets import MINUTE_MS
from hifi.vocabulary import Outcome
from tests.auditor.support import audited_destination
from tests.auditor.test_ledger import T0, TP, fact, ledger
from tests.auditor.test_share_merge import FIGURES, P0, P1, SETTLED_MS, _member, share_entries


def test_an_open_minute_is_posted_packed_and_packed_again_only_after_a_delivery() -> None:
    book = ledger()
    book.enter(T0, TP, range(20))
    book.apply(fact(Outcome.DELIVERED, list(range(10)), at_ms=T0 + 1300))
    bucket = book.buckets[T0]
    first = share_row(book, bucket)
    assert isinstance(first["spread"], bytes)
    assert "lags_ms" not in first  # no list of a value per lag on the board
    lags, lag_in, process = distributions(first)
    assert sum(n for _, n in lags) == sum(n for _, n in lag_in) == sum(n for _, n in process) == 10
    assert share_row(book, bucket)["spread"] is first["spread"]  # nothing new: not packed again

    book.apply(fact(Outcome.DELIVERED, list(range(10, 15)), at_ms=T0 + 2600))
    again = share_row(book, bucket)
    assert sum(n for _, n in distributions(again)[0]) == 15

    book.advance(T0 + MINUTE_MS + 61_000)
    final = share_row(book, bucket)
    assert bucket.final
    assert final["spread"] is bucket.spread  # as judged, not packed again
    assert share_row(book, bucket, spread=False)["spread"] is None
    assert distributions(share_row(book, bucket, spread=False)) == ([], [], [])


def _format_1(row: dict[str, Any]) -> dict[str, Any]:
    """A share row as a member of the earlier release posted it: its distributions as lists."""
    lags, lag_in, process = distributions(row)
    old = {k: v for k, v in row.items() if k != "spread"}
    return {**old, "lags_ms": lags, "lag_in": lag_in, "process": process}


def test_a_share_an_earlier_release_posted_merges_with_this_ones(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """During a rolling upgrade: P1's rows in format 1, P0's packed; the destination's minutes
    are the ones two members of this release give."""
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", "src")
    members = [_member(dest, [P0], tmp_path / "a"), _member(dest, [P1], tmp_path / "b")]
    entries = share_entries(members)

    def rows(of: dict[TopicPartition, Any]) -> list[dict[str, Any]]:
        view = DestinationView(dest, [P0, P1])
        view.update(of)
        got = view.rows(from_ms=None, to_ms=None, now_ms=SETTLED_MS)
        return [{k: row[k] for k in FIGURES} for row in got]

    both_new = rows(entries)
    old_p1 = entries[P1]["dests"]["d"]
    mixed = {
        **entries,
        P1: {
            **entries[P1],
            "dests": {"d": {**old_p1, "rows": [_format_1(r) for r in old_p1["rows"]]}},
        },
    }
    assert rows(mixed) == both_new
    assert both_new[0]["lag_p95_ms"] is not None


def test_the_board_reads_an_earlier_releases_files_and_a_post_replaces_them(
    tmp_path: Path,
) -> None:
    board = tmp_path / "board"
    board.mkdir()
    p0, p1 = TopicPartition("my.src", 0), TopicPartition("my.src", 1)

    def old_file(tp: TopicPartition, written_ms: int) -> Path:
        path = board / f"{tp.topic}--{tp.partition}.board"
        path.write_bytes(msgspec.msgpack.encode({"member": "old", "written_ms": written_ms}))
        return path

    p0_old, p1_old = old_file(p0, 10), old_file(p1, 50)
    post(board, p1, {"member": "new", "written_ms": 40})
    assert {tp: e["member"] for tp, e in read_board(board).items()} == {p0: "old", p1: "new"}
    assert not p1_old.exists()  # a post removes the earlier release's file of its share

    old_file(p1, 50)  # the old member wrote again (it still held the share): the newest wins
    assert read_board(board)[p1]["member"] == "old"

    post(board, p0, {"member": "new", "written_ms": 20})
    assert not p0_old.exists()
    assert sorted(p.name for p in board.iterdir()) == [
        "my.src--0.board2",
        "my.src--1.board",
        "my.src--1.board2",
    ]
    assert read_board(board)[p0]["member"] == "new"


def test_a_final_minute_lets_its_distributions_go_once_no_member_reads_them_again() -> None:
    """Kept while the destination's horizon is within `KEEP_POSTED_MS` of the minute or it
    changed lately; let go after, and posted without them (nor a share's own percentiles in
    their place) when it changes again."""
    book = ledger()
    book.enter(T0, TP, range(10))
    book.apply(fact(Outcome.DELIVERED, list(range(10)), at_ms=T0 + 1300))
    book.advance(T0 + MINUTE_MS + 61_000)
    bucket = book.buckets[T0]
    judged = book.lags(bucket)
    horizon = T0 + MINUTE_MS
    (row,) = share_entry(book, horizon_ms=horizon, changed={}, now_ms=horizon)["rows"]
    assert row["spread"] is bucket.spread
    assert bucket.spread  # the lead may not have merged it yet

    later = horizon + KEEP_POSTED_MS + MINUTE_MS
    changed = {T0: later - 1_000}
    (row,) = share_entry(book, horizon_ms=later, changed=changed, now_ms=later)["rows"]
    assert row["spread"] is bucket.spread  # changed lately: posted whole again

    (row,) = share_entry(book, horizon_ms=later, changed={}, now_ms=later)["rows"]
    assert row["spread"] is None
    assert bucket.spread == LET_GO
    (row,) = share_entry(book, horizon_ms=later, changed=changed, now_ms=later)["rows"]
    assert (row["spread"], row["fixed_lags"]) == (LET_GO, None)
    assert distributions(row) == ([], [], [])
    assert book.lags(bucket) == judged  # its own tables keep the lags it was judged on
    again = ledger()
    again.restore(msgspec.msgpack.decode(msgspec.msgpack.encode(book.snapshot())))
    assert again.buckets[T0].spread == LET_GO
    assert again.lags(again.buckets[T0]) == judged
