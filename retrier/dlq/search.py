"""Text filters over the dead-letter index: the spill scanned once per text, the result kept and extended."""

from __future__ import annotations

from collections import OrderedDict

import pyarrow as pa

from retrier.dlq.spill import Spill, literal

CACHED_TEXTS = 8  # text filters whose per-letter result is kept (the dashboard repeats them)
_MAX_MASK_CHUNKS = 64


class TextMatches:
    """Per text filter, which letters hold it in their search text: the last `CACHED_TEXTS`
    filters are kept, each extended to the letters added since it was last asked."""

    def __init__(self, spill: Spill) -> None:
        self._spill = spill
        self._texts: OrderedDict[str, tuple[int, list[pa.BooleanArray]]] = OrderedDict()

    def matches(self, needle: str, n: int) -> pa.ChunkedArray:
        """Whether each of the first `n` letters has `needle` (lower case) in its search text."""
        scanned, chunks = self._texts.pop(needle, (0, []))
        if scanned < n:
            chunks = [*chunks, *self._spill.matching(literal(needle), scanned, n)]
            if len(chunks) > _MAX_MASK_CHUNKS:
                chunks = [pa.concat_arrays(chunks)]
        self._texts[needle] = (n, chunks)
        while len(self._texts) > CACHED_TEXTS:
            self._texts.popitem(last=False)
        return pa.chunked_array(chunks, type=pa.bool_())

    @property
    def nbytes(self) -> int:
        """What the kept results hold in memory, about."""
        return sum(n // 8 + 64 * len(chunks) for n, chunks in self._texts.values())
