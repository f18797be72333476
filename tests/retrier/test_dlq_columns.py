"""The dead-letter index's columns: appended across chunks, written in place, seen by pyarrow as they are."""

from __future__ import annotations

import array
import mmap

import pyarrow as pa
import pyarrow.compute as pc

from hifi.memory import rss_bytes
from retrier.dlq.columns import CHUNK_ROWS, Column, Interned, indices, value_counts


def test_a_column_spans_chunks_and_its_arrow_view_follows_writes() -> None:
    """Values appended over several chunks read back the same through indexing and pyarrow; a
    view taken before a write in place shows the write (no copy), and appending never moves it."""
    column = Column("q")
    rows = 2 * CHUNK_ROWS + 10
    column.extend(array.array("q", range(rows - 5)))
    column.extend(array.array("q", range(rows - 5, rows)))
    view = column.arrow(rows)
    assert len(column) == view.length() == rows
    assert (column[CHUNK_ROWS], column[rows - 1]) == (CHUNK_ROWS, rows - 1)
    assert pc.sum(view).as_py() == rows * (rows - 1) // 2
    column[CHUNK_ROWS + 1] = -7
    column.extend(array.array("q", [42] * CHUNK_ROWS))  # a new chunk while the view is held
    assert view[CHUNK_ROWS + 1].as_py() == -7


def test_a_column_holds_the_memory_of_its_rows_not_of_a_whole_chunk() -> None:
    """The first letter of a destination's index must not make whole chunks resident: 64
    columns of one row each hold a page each (a chunk each would be 32 MB), and `nbytes` says
    so; a full chunk and a row of the next hold the chunk and a page."""
    before = rss_bytes()
    columns = [Column("q") for _ in range(64)]
    for column in columns:
        column.extend(array.array("q", [7]))
    grew = rss_bytes() - before
    assert grew < 4 * 1024 * 1024, f"{grew} bytes resident for 64 rows"
    assert [column.nbytes for column in columns] == [mmap.PAGESIZE] * 64
    assert columns[0].arrow(1).to_pylist() == [7]
    full = Column("B")
    full.extend(array.array("B", [1] * (CHUNK_ROWS + 1)))
    assert full.nbytes == CHUNK_ROWS + mmap.PAGESIZE


def test_fill_writes_where_a_mask_is_true_across_chunks() -> None:
    """`fill` sets exactly the masked rows, in every chunk, and leaves the others."""
    column = Column("H")
    rows = CHUNK_ROWS + 100
    column.extend(array.array("H", [1] * rows))
    every_third = pa.chunked_array([pa.array([i % 3 == 0 for i in range(rows)])])
    column.fill(every_third, 9)
    assert value_counts(column.arrow(rows)) == [(9, (rows + 2) // 3), (1, rows - (rows + 2) // 3)]
    assert indices(pc.equal(column.arrow(rows), 9)) == list(range(0, rows, 3))


def test_interned_values_stop_growing_at_the_limit() -> None:
    """Past `limit` new values all get the overflow's key."""
    interned: Interned[str] = Interned(2, "(others)")
    assert [interned.key(v) for v in ("a", "b", "a", "c", "d")] == [1, 2, 1, 0, 0]
    assert [interned.value(k) for k in (0, 1, 2)] == ["(others)", "a", "b"]
