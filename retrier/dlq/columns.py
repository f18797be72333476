"""Columns of the dead-letter index: integers in chunks that never move, read by pyarrow without a copy."""

from __future__ import annotations

import array
import mmap
from typing import Generic, Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

CHUNK_ROWS = 1 << 16
_SHIFT = CHUNK_ROWS.bit_length() - 1
_LOW = CHUNK_ROWS - 1
T = TypeVar("T")
TypeCode = Literal["B", "H", "I", "i", "q"]
_ARROW_TYPES: dict[TypeCode, pa.DataType] = {
    "B": pa.uint8(),
    "H": pa.uint16(),
    "I": pa.uint32(),
    "i": pa.int32(),
    "q": pa.int64(),
}


class Column:
    """A growing column of one `array` type code.

    Each chunk is an anonymous memory map of `CHUNK_ROWS` values, mapped whole and never
    resized: a pyarrow view of it (`arrow()`) stays valid while values are appended after it or
    written in place, and costs no copy. The system makes a page of it resident when a row in
    it is first written, so a column holds the memory of the rows it has, to the page, and not
    a whole chunk from its first row. One thread writes; others may read the rows already
    written.
    """

    def __init__(self, typecode: TypeCode) -> None:
        self.typecode = typecode
        self._type = _ARROW_TYPES[typecode]
        self._itemsize = array.array(typecode).itemsize
        self._chunks: list[mmap.mmap] = []
        self._views: list[memoryview] = []  # each chunk cast to `typecode`
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, row: int) -> int:
        if not 0 <= row < self._len:
            raise IndexError(f"row {row} of a column of {self._len}")
        value: int = self._views[row >> _SHIFT][row & _LOW]
        return value

    def __setitem__(self, row: int, value: int) -> None:
        if not 0 <= row < self._len:
            raise IndexError(f"row {row} of a column of {self._len}")
        self._views[row >> _SHIFT][row & _LOW] = value

    def extend(self, values: array.array[int]) -> None:
        """Append `values` (an array of this column's type code)."""
        source = memoryview(values)
        done = 0
        while done < len(values):
            at = self._len & _LOW
            if at == 0 and self._len == len(self._chunks) * CHUNK_ROWS:
                self._add_chunk()
            count = min(CHUNK_ROWS - at, len(values) - done)
            self._views[-1][at : at + count] = source[done : done + count]
            done += count
            self._len += count

    def arrow(self, rows: int) -> pa.ChunkedArray:
        """The first `rows` values as a pyarrow array over this column's memory (no copy)."""
        chunks = []
        for start in range(0, rows, CHUNK_ROWS):
            buffer = pa.py_buffer(self._chunks[start >> _SHIFT])
            length = min(CHUNK_ROWS, rows - start)
            chunks.append(pa.Array.from_buffers(self._type, length, [None, buffer]))
        return pa.chunked_array(chunks, type=self._type)

    def fill(self, where: pa.ChunkedArray, value: int) -> None:
        """Write `value` in every row where the boolean column `where` (of the first rows) is true."""
        for start in range(0, len(where), CHUNK_ROWS):
            length = min(CHUNK_ROWS, len(where) - start)
            mask = where.slice(start, length).combine_chunks()
            if not mask.true_count:
                continue
            chunk = self.arrow(start + length).chunk(start >> _SHIFT)
            filled = pc.if_else(mask, pa.scalar(value, self._type), chunk)
            written = memoryview(filled.buffers()[1]).cast(self.typecode)
            self._views[start >> _SHIFT][:length] = written[filled.offset : filled.offset + length]

    @property
    def nbytes(self) -> int:
        """Memory the rows written take, to the page (the rest of a chunk is mapped, not held)."""
        if not self._chunks:
            return 0
        last_bytes = (self._len - (len(self._chunks) - 1) * CHUNK_ROWS) * self._itemsize
        last_pages = -(-last_bytes // mmap.PAGESIZE)
        return (len(self._chunks) - 1) * CHUNK_ROWS * self._itemsize + last_pages * mmap.PAGESIZE

    def _add_chunk(self) -> None:
        # private and anonymous: zeros, made resident page by page as rows are written
        chunk = mmap.mmap(-1, CHUNK_ROWS * self._itemsize, flags=mmap.MAP_PRIVATE)
        self._chunks.append(chunk)
        self._views.append(memoryview(chunk).cast(self.typecode))


class Interned(Generic[T]):
    """A column's values by a small integer key, up to `limit` of them; the rest share the key
    of `overflow` (0), so a column of keys never grows a dictionary without bound."""

    def __init__(self, limit: int, overflow: T) -> None:
        self._limit = limit
        self._values: list[T] = [overflow]
        self._keys: dict[T, int] = {overflow: 0}
        self.nbytes = 0  # an estimate

    def key(self, value: T) -> int:
        found = self._keys.get(value)
        if found is not None:
            return found
        if len(self._values) > self._limit:
            return 0
        self._keys[value] = len(self._values)
        self._values.append(value)
        self.nbytes += 200 + len(repr(value))
        return len(self._values) - 1

    def value(self, key: int) -> T:
        return self._values[key]


def true_count(mask: pa.ChunkedArray) -> int:
    """How many values of a boolean column are true."""
    return sum(chunk.true_count for chunk in mask.chunks)


def indices(mask: pa.ChunkedArray) -> list[int]:
    """Where a boolean column is true."""
    found: list[int] = []
    start = 0
    for chunk in mask.chunks:
        if chunk.true_count:
            found.extend(start + i for i in pc.indices_nonzero(chunk).to_pylist())
        start += len(chunk)
    return found


def value_counts(values: pa.ChunkedArray | pa.Array) -> list[tuple[int, int]]:
    """(value, how many times) of an integer column."""
    counted = pc.value_counts(values).to_pylist()
    return [(entry["values"], entry["counts"]) for entry in counted]
