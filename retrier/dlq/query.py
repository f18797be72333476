"""What is asked of the dead-letter index and what it answers: filters, cursors, rows and pages."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from retrier.dlq.letter import REASONS


@dataclass(frozen=True, slots=True)
class LetterFilter:
    """Which letters: all of these that are set (a reason of `REASONS`, `from_ms` <= dead_ms <
    `to_ms`, a text anywhere in the search text, case-insensitive; replayed or not)."""

    reason: str | None = None
    from_ms: int | None = None
    to_ms: int | None = None
    text: str | None = None
    replayed: bool | None = None

    def __post_init__(self) -> None:
        if self.reason is not None and self.reason not in REASONS:
            raise ValueError(f"reason {self.reason!r} is not one of {', '.join(REASONS)}")


@dataclass(frozen=True, slots=True, order=True)
class Cursor:
    """Where a page ended: the next page lists the letters after it, in (dead_ms, partition,
    offset) descending; letters appended meanwhile neither repeat nor hide one."""

    dead_ms: int
    partition: int
    offset: int

    def token(self) -> str:
        """The cursor as an opaque string (for a URL)."""
        return f"{self.dead_ms}.{self.partition}.{self.offset}"

    @classmethod
    def from_token(cls, token: str) -> Cursor:
        """The cursor of `token()`; ValueError when `token` is not one."""
        parts = token.split(".")
        if len(parts) != 3:
            raise ValueError(f"not a dead-letter cursor: {token[:40]!r}")
        dead_ms, partition, offset = (int(part) for part in parts)
        return cls(dead_ms, partition, offset)

    def older(
        self, dead_ms: pa.ChunkedArray, partitions: pa.ChunkedArray, offsets: pa.ChunkedArray
    ) -> pa.ChunkedArray:
        """Which letters come after this cursor in the listing's order."""
        same_ms = pc.equal(dead_ms, self.dead_ms)
        later_in_ms = pc.or_(
            pc.less(partitions, self.partition),
            pc.and_(pc.equal(partitions, self.partition), pc.less(offsets, self.offset)),
        )
        return pc.or_(pc.less(dead_ms, self.dead_ms), pc.and_(same_ms, later_in_ms))


@dataclass(frozen=True, slots=True)
class LetterRow:
    """One listed letter; every text is masked."""

    partition: int
    offset: int
    dead_ms: int
    reason: str
    status: str  # the HTTP status, or "-"
    error: str  # one line, at most 200 characters
    event_id: str  # "" when the letter has no event id
    origin: str  # topic/partition/offset where the event first entered hifi
    replayed_ms: int | None  # when it was last replayed; None: never
    replayed_by: str | None
    excerpt: str  # the start of the body on one line, at most 120 characters


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing, newest first."""

    rows: list[LetterRow]
    next: Cursor | None  # None: this is the last page
    total: int  # letters matching the filter, the same on every page
