"""The dead-letter index of one destination: NAME.dlq listed, counted, searched and found without Kafka.

Per letter the index holds about 60 bytes of columns (position, time, reason, failure group,
replay mark, hashes of its event id and origin) and writes its search text and its row to a
spill directory (`retrier.dlq.spill`). Filters on reason, time and replay are pyarrow kernels
over the columns; a text filter scans the spill file once and is then kept per text, extended
as letters arrive. Listing is keyset paging on (dead_ms, partition, offset), newest first, so a
cursor stays right while letters are appended.

Threads: one writer (`add`, `mark_replayed`: the indexing task on the retrier's event loop),
and readers (every other method) in any thread, one at a time (they take a lock the writer
does not). A reader sees the letters counted when it starts: each is written whole before the
count moves. A cold text query scans the spill file, so a server on the event loop runs the
readers with `asyncio.to_thread`. Every call returns plain values.
"""

from __future__ import annotations

import array
import asyncio
import functools
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import reduce
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from retrier.dlq.columns import Column, Interned, indices, true_count, value_counts
from retrier.dlq.letter import REASONS, UNKNOWN, Letter, decode_row, read_letter
from retrier.dlq.query import Cursor, LetterFilter, LetterRow, Page
from retrier.dlq.search import TextMatches
from retrier.dlq.spill import Spill

__all__ = [
    "REASONS",
    "UNKNOWN",
    "Cursor",
    "DeadLetterIndex",
    "LetterFilter",
    "LetterRow",
    "Page",
]

MAX_FAILURE_GROUPS = 10_000  # beyond this many (status, error) kinds, the rest count as one
OTHER_FAILURES = ("*", "(other failures)")
MAX_REPLAYERS = 1_000  # who replayed: beyond this many names, the rest are one
OTHER_REPLAYERS = "(others)"
_APPEND_LETTERS = 1024  # letters read before they are appended: bounds the memory of one `add`
_HASH_MASK = 0xFFFF_FFFF  # 32-bit hashes of ids and origins: candidates, checked on the row
_NEVER = -(2**63)  # the sort key of a letter that is not selected: after every real one
P = ParamSpec("P")
R = TypeVar("R")


def _one_reader(
    method: Callable[Concatenate[DeadLetterIndex, P], R],
) -> Callable[Concatenate[DeadLetterIndex, P], R]:
    """Run a reading method under the index's reader lock."""

    @functools.wraps(method)
    def read(index: DeadLetterIndex, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with index._reading:
            return method(index, *args, **kwargs)

    return read


class DeadLetterIndex:
    """The letters of one NAME.dlq; `indexing()` fills it from Kafka, tests call `add` directly."""

    def __init__(self, topic: str, *, spill_dir: Path | None = None) -> None:
        self.topic = topic
        self._temporary: tempfile.TemporaryDirectory[str] | None = None
        if spill_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="hifi-dlq-index-")
            spill_dir = Path(self._temporary.name)
        self._spill = Spill(spill_dir)
        self._partition = Column("i")
        self._offset = Column("q")
        self._dead_ms = Column("q")
        self._reason = Column("B")
        self._failure = Column("I")
        self._replayed_ms = Column("q")  # 0: never replayed
        self._replayed_by = Column("H")
        self._id_hash = Column("I")
        self._origin_hash = Column("I")
        self._count = 0
        self._failures: Interned[tuple[str, str]] = Interned(MAX_FAILURE_GROUPS, OTHER_FAILURES)
        self._replayers: Interned[str] = Interned(MAX_REPLAYERS, OTHER_REPLAYERS)
        self._next_offsets: dict[int, int] = {}
        self._pending_marks: dict[tuple[int, int], tuple[int, int]] = {}
        self._texts = TextMatches(self._spill)
        self._reading = threading.Lock()
        #: set once the letters NAME.dlq held when indexing started are all in
        self.ready = asyncio.Event()
        #: how many letters NAME.dlq held when indexing started (None until known)
        self.expected: int | None = None

    def __len__(self) -> int:
        return self._count

    def __enter__(self) -> DeadLetterIndex:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the spill files (and remove them when the index chose their directory)."""
        self._spill.close()
        if self._temporary is not None:
            self._temporary.cleanup()

    # --- filling ----------------------------------------------------------------------

    def add(self, records: Iterable[Any]) -> int:
        """Index records of NAME.dlq (in offset order per partition); returns how many were new.

        A record already indexed (at or below the last offset of its partition) is skipped; one
        that cannot be read is indexed with reason "unknown".
        """
        added = 0
        letters: list[Letter] = []
        for record in records:
            letter = read_letter(record)
            if letter.offset >= 0:
                if letter.offset < self._next_offsets.get(letter.partition, 0):
                    continue
                self._next_offsets[letter.partition] = letter.offset + 1
            letters.append(letter)
            if len(letters) == _APPEND_LETTERS:
                added += self._append(letters)
                letters = []
        return added + self._append(letters)

    def next_offsets(self) -> dict[int, int]:
        """Per partition, the offset after the last letter indexed."""
        return dict(self._next_offsets)

    def mark_replayed(self, coords: Iterable[tuple[int, int]], *, at_ms: int, by: str) -> int:
        """Mark the letters at these (partition, offset) as replayed at `at_ms` by `by`; returns
        how many are marked now. A mark for a letter not indexed yet is applied when it is."""
        who = self._replayers.key(by)
        wanted: dict[int, array.array[int]] = {}
        for partition, offset in coords:
            wanted.setdefault(partition, array.array("q")).append(offset)
        n = self._count
        partitions, offsets = self._partition.arrow(n), self._offset.arrow(n)
        marked = 0
        for partition, listed in wanted.items():
            asked = pa.array(listed, pa.int64())
            hit = pc.and_(pc.equal(partitions, partition), pc.is_in(offsets, value_set=asked))
            self._replayed_ms.fill(hit, at_ms)
            self._replayed_by.fill(hit, who)
            marked += true_count(hit)
            missing = pc.filter(asked, pc.invert(pc.is_in(asked, pc.filter(offsets, hit))))
            last = self._next_offsets.get(partition, 0)
            for offset in missing.to_pylist():
                if offset >= last:
                    self._pending_marks[(partition, offset)] = (at_ms, who)
        return marked

    # --- reading ----------------------------------------------------------------------

    @_one_reader
    def count(self, flt: LetterFilter) -> int:
        n = self._count
        return _selected_count(self._selection(flt, n), n)

    @_one_reader
    def page(self, flt: LetterFilter, *, before: Cursor | None = None, limit: int = 50) -> Page:
        """Up to `limit` letters matching `flt`, newest first, older than `before` if given."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        n = self._count
        selected = self._selection(flt, n)
        total = _selected_count(selected, n)
        if total == 0:
            return Page([], None, 0)
        dead_ms, partitions, offsets = (c.arrow(n) for c in self._positions)
        if before is not None:
            older = before.older(dead_ms, partitions, offsets)
            selected = older if selected is None else pc.and_(selected, older)
        key = dead_ms if selected is None else pc.if_else(selected, dead_ms, _NEVER)
        table = pa.table([key, partitions, offsets], names=["dead_ms", "partition", "offset"])
        order = [(name, "descending") for name in table.column_names]
        top = pc.select_k_unstable(table, k=min(limit + 1, n), sort_keys=order)
        picked = top.to_pylist()
        if selected is not None:
            kept = pc.take(selected, top).to_pylist()
            picked = [row for row, keep in zip(picked, kept, strict=True) if keep]
        rows = [self._row(row) for row in picked[:limit]]
        last = rows[-1] if len(picked) > limit else None
        following = Cursor(last.dead_ms, last.partition, last.offset) if last else None
        return Page(rows, following, total)

    @_one_reader
    def find(self, key: str) -> list[LetterRow]:
        """The letters whose event id or origin (topic/partition/offset) is `key`, or the letter
        at `key` in NAME.dlq itself; newest first."""
        key = key.strip()
        if not key:
            return []
        n = self._count
        hashed = _hash(key)
        hit = pc.or_(
            pc.equal(self._id_hash.arrow(n), hashed), pc.equal(self._origin_hash.arrow(n), hashed)
        )
        own = _position_in(key, self.topic)
        if own is not None:
            hit = pc.or_(
                hit,
                pc.and_(
                    pc.equal(self._partition.arrow(n), own[0]),
                    pc.equal(self._offset.arrow(n), own[1]),
                ),
            )
        rows = [self._row(row) for row in indices(hit)]
        found = [
            row
            for row in rows
            if key in (row.event_id, row.origin) or (row.partition, row.offset) == own
        ]
        return sorted(found, key=lambda r: (r.dead_ms, r.partition, r.offset), reverse=True)

    @_one_reader
    def coordinates(self, flt: LetterFilter) -> dict[int, list[int]]:
        """The (partition -> offsets, ascending) of the letters matching `flt`: what a replay reads."""
        n = self._count
        selected = self._selection(flt, n)
        partitions, offsets = self._partition.arrow(n), self._offset.arrow(n)
        if selected is not None:
            partitions, offsets = pc.filter(partitions, selected), pc.filter(offsets, selected)
        found: dict[int, list[int]] = {}
        for partition, _ in sorted(value_counts(partitions)):
            # a partition's letters are indexed in offset order, and filtering keeps the order
            found[partition] = pc.filter(offsets, pc.equal(partitions, partition)).to_pylist()
        return found

    @_one_reader
    def counts_by_reason(self, flt: LetterFilter | None = None) -> dict[str, int]:
        """Letters per reason (every reason of `REASONS`, 0 included), of those matching `flt`."""
        n = self._count
        selected = self._selection(flt or LetterFilter(), n)
        reasons = self._reason.arrow(n)
        if selected is not None:
            reasons = pc.filter(reasons, selected)
        counts = dict.fromkeys(REASONS, 0)
        for code, count in value_counts(reasons):
            counts[REASONS[code]] = count
        return counts

    @_one_reader
    def growth(self, now_ms: int, *, bucket_s: float, buckets: int) -> list[int]:
        """Letters dead-lettered in each of the `buckets` periods of `bucket_s` before `now_ms`,
        oldest first."""
        bucket_ms = round(bucket_s * 1000)
        if bucket_ms < 1 or buckets < 1:
            raise ValueError("growth needs a bucket of 1 ms or more and 1 bucket or more")
        start_ms = now_ms - bucket_ms * buckets
        dead_ms = self._dead_ms.arrow(self._count)
        inside = pc.and_(pc.greater_equal(dead_ms, start_ms), pc.less(dead_ms, now_ms))
        bucket = pc.divide(pc.subtract(pc.filter(dead_ms, inside), start_ms), bucket_ms)
        counts = [0] * buckets
        for index, count in value_counts(bucket):
            counts[index] = count
        return counts

    @_one_reader
    def failure_groups(self, since_ms: int) -> list[tuple[str, str, int]]:
        """(status, error, letters) of the letters dead since `since_ms`, most letters first;
        errors that differ only in ids and numbers (runs of 4+ digits, hex ids, UUIDs: `#`)
        are one group."""
        n = self._count
        groups = pc.filter(
            self._failure.arrow(n), pc.greater_equal(self._dead_ms.arrow(n), since_ms)
        )
        counted = sorted(value_counts(groups), key=lambda pair: (-pair[1], pair[0]))
        return [(*self._failures.value(group), count) for group, count in counted]

    @property
    def size_bytes(self) -> int:
        """Memory held by the index (the spill files are on disk, not counted)."""
        columns = sum(column.nbytes for column in self._columns)
        return columns + self._spill.memory_bytes + self._failures.nbytes + self._texts.nbytes

    @property
    def spill_bytes(self) -> int:
        """Bytes of the spill files on disk."""
        return self._spill.nbytes

    # --- internals --------------------------------------------------------------------

    @property
    def _positions(self) -> tuple[Column, Column, Column]:
        return self._dead_ms, self._partition, self._offset

    @property
    def _columns(self) -> tuple[Column, ...]:
        return (
            *self._positions,
            self._reason,
            self._failure,
            self._replayed_ms,
            self._replayed_by,
            self._id_hash,
            self._origin_hash,
        )

    def _append(self, letters: Sequence[Letter]) -> int:
        if not letters:
            return 0
        self._spill.append([letter.text for letter in letters], [letter.row for letter in letters])
        failure = self._failures.key
        values: list[tuple[Column, Iterable[int]]] = [
            (self._partition, (letter.partition for letter in letters)),
            (self._offset, (letter.offset for letter in letters)),
            (self._dead_ms, (letter.dead_ms for letter in letters)),
            (self._reason, (letter.reason for letter in letters)),
            (self._failure, (failure(letter.failure) for letter in letters)),
            (self._replayed_ms, (0 for _ in letters)),
            (self._replayed_by, (0 for _ in letters)),
            (self._id_hash, (_hash(letter.event_id) for letter in letters)),
            (self._origin_hash, (_hash(letter.origin) for letter in letters)),
        ]
        for column, column_values in values:
            column.extend(array.array(column.typecode, column_values))
        first = self._count
        self._count += len(letters)
        if self._pending_marks:
            for row, letter in enumerate(letters, start=first):
                mark = self._pending_marks.pop((letter.partition, letter.offset), None)
                if mark is not None:
                    self._replayed_ms[row], self._replayed_by[row] = mark
        return len(letters)

    def _selection(self, flt: LetterFilter, n: int) -> pa.ChunkedArray | None:
        """Which of the first `n` letters match `flt`; None when the filter selects all."""
        conditions = []
        if flt.reason is not None:
            conditions.append(pc.equal(self._reason.arrow(n), REASONS.index(flt.reason)))
        if flt.from_ms is not None:
            conditions.append(pc.greater_equal(self._dead_ms.arrow(n), flt.from_ms))
        if flt.to_ms is not None:
            conditions.append(pc.less(self._dead_ms.arrow(n), flt.to_ms))
        if flt.replayed is not None:
            replayed = pc.greater(self._replayed_ms.arrow(n), 0)
            conditions.append(replayed if flt.replayed else pc.invert(replayed))
        needle = (flt.text or "").strip().lower()
        if needle:
            conditions.append(self._texts.matches(needle, n))
        return reduce(pc.and_, conditions) if conditions else None

    def _row(self, row: int) -> LetterRow:
        event_id, origin, status, error, excerpt = decode_row(self._spill.row(row))
        replayed_ms = self._replayed_ms[row]
        return LetterRow(
            partition=self._partition[row],
            offset=self._offset[row],
            dead_ms=self._dead_ms[row],
            reason=REASONS[self._reason[row]],
            status=status,
            error=error,
            event_id=event_id,
            origin=origin,
            replayed_ms=replayed_ms or None,
            replayed_by=self._replayers.value(self._replayed_by[row]) if replayed_ms else None,
            excerpt=excerpt,
        )


def _hash(text: str) -> int:
    """32 bits of the text's hash (salted per process: fine, the index lives in one)."""
    return hash(text) & _HASH_MASK


def _selected_count(selected: pa.ChunkedArray | None, n: int) -> int:
    return n if selected is None else true_count(selected)


def _position_in(key: str, topic: str) -> tuple[int, int] | None:
    """(partition, offset) when `key` is `topic/partition/offset`."""
    head, _, rest = key.rpartition("/")
    name, _, partition = head.rpartition("/")
    if name != topic or not _digits(partition) or not _digits(rest):
        return None
    return int(partition), int(rest)


def _digits(text: str) -> bool:
    """ASCII digits only (`str.isdigit` takes `²`, which `int` refuses)."""
    return text.isascii() and text.isdigit()
