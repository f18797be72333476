"""The dead-letter index on disk: each letter's search text and row in two append-only files, and the text scan.

The files live in a directory of their own, emptied when the index starts (it is rebuilt from
NAME.dlq at every start), and count in the page cache, not in the process's memory. A text
query reads the search texts in batches of about `SCAN_BATCH_BYTES` into one reused buffer per
scanning thread and runs RE2 over each batch as a pyarrow array of one string per letter, so a
match never spans two letters and no Python code runs per letter or per match.
"""

from __future__ import annotations

import array
import bisect
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from retrier.dlq.columns import Column

SCAN_BATCH_BYTES = 8 * 1024 * 1024
SCAN_THREADS = 2  # pyarrow and file reads release the GIL: a scan uses two cores when it has them
TEXT_FILE = "text.bin"
ROWS_FILE = "rows.bin"


class Spill:
    """Search texts and rows of the letters of one index, letter `i` at `i` in both files."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self._text_fd = os.open(directory / TEXT_FILE, flags, 0o600)
        self._rows_fd = os.open(directory / ROWS_FILE, flags, 0o600)
        self._text_bounds = Column("q")  # where the text of letter i starts; one more: the end
        self._row_bounds = Column("q")
        self._text_bounds.extend(array.array("q", [0]))
        self._row_bounds.extend(array.array("q", [0]))
        self._threads: ThreadPoolExecutor | None = None
        self._buffers = threading.local()

    def append(self, texts: Sequence[bytes], rows: Sequence[bytes]) -> None:
        """Write the search texts and rows of the next letters."""
        _append(self._text_fd, texts, self._text_bounds)
        _append(self._rows_fd, rows, self._row_bounds)

    def row(self, letter: int) -> bytes:
        start, end = self._row_bounds[letter], self._row_bounds[letter + 1]
        return os.pread(self._rows_fd, end - start, start)

    def matching(self, pattern: str, start: int, stop: int) -> list[pa.BooleanArray]:
        """Whether each letter from `start` to `stop` has a match of the RE2 `pattern`, in
        batches: one boolean array per batch, in letter order."""
        bounds = self._text_bounds.arrow(stop + 1)
        batches = []
        first = start
        while first < stop:
            limit = self._text_bounds[first] + SCAN_BATCH_BYTES
            last = bisect.bisect_right(self._text_bounds, limit, first + 1, stop + 1) - 1
            last = max(last, first + 1)  # a letter larger than a batch is a batch of its own
            batches.append(bounds.slice(first, last - first + 1).combine_chunks())
            first = last
        if self._threads is None:  # scans run on these threads only: one buffer each
            self._threads = ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="dlq-scan")
        return list(self._threads.map(lambda b: self._scan(pattern, b), batches))

    @property
    def nbytes(self) -> int:
        """Bytes on disk."""
        return (
            self._text_bounds[len(self._text_bounds) - 1]
            + self._row_bounds[len(self._row_bounds) - 1]
        )

    @property
    def memory_bytes(self) -> int:
        """Bytes of memory: the position columns and the scan buffers."""
        buffers = SCAN_BATCH_BYTES * SCAN_THREADS if self._threads is not None else 0
        return self._text_bounds.nbytes + self._row_bounds.nbytes + buffers

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()
        os.close(self._text_fd)
        os.close(self._rows_fd)

    def _scan(self, pattern: str, bounds: pa.Int64Array) -> pa.BooleanArray:
        """Match `pattern` against the letters whose text bounds are `bounds` (n + 1 positions)."""
        base = bounds[0].as_py()
        size = bounds[-1].as_py() - base
        buffer = self._buffer(size)
        _read_fully(self._text_fd, memoryview(buffer)[:size], base)
        offsets = pc.subtract(bounds, pa.scalar(base, pa.int64()))
        texts = pa.Array.from_buffers(
            pa.large_utf8(), len(bounds) - 1, [None, offsets.buffers()[1], pa.py_buffer(buffer)]
        )
        matched: pa.BooleanArray = pc.match_substring_regex(texts, pattern)
        return matched

    def _buffer(self, size: int) -> bytearray:
        """This thread's read buffer, at least `size` bytes."""
        buffer: bytearray | None = getattr(self._buffers, "buffer", None)
        if buffer is None or len(buffer) < size:
            buffer = bytearray(max(size, SCAN_BATCH_BYTES))
            self._buffers.buffer = buffer
        return buffer


def literal(text: str) -> str:
    """An RE2 pattern matching `text` literally."""
    return "\\Q" + text.replace("\\E", "\\E\\\\E\\Q") + "\\E"


def _append(fd: int, pieces: Sequence[bytes], bounds: Column) -> None:
    end = bounds[len(bounds) - 1]
    ends = array.array("q")
    for piece in pieces:
        end += len(piece)
        ends.append(end)
    data = memoryview(b"".join(pieces))
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])
    bounds.extend(ends)


def _read_fully(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise OSError(f"dead-letter index: {len(view) - done} bytes missing at {offset + done}")
        done += got
