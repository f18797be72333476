"""Percentiles of lags: exact by nearest rank, and approximate from a log-spaced histogram with 2 % wide bins."""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable

_HIST_GROWTH = 1.02  # bin width of the approximate histograms
_HIST_BINS = int(math.log(86_400_000) / math.log(_HIST_GROWTH)) + 2  # 1 ms .. 1 day


def rank_of(pct: int, n: int) -> int:
    """The nearest rank of the `pct` percentile among `n` values, 1-based: ceil(pct * n / 100),
    in integers (no float rounding), at least 1. Spark's and DuckDB's checks use the same rule."""
    return max(1, -(-pct * n // 100))


def nearest_rank(sorted_values: array[int] | list[int], pct: int) -> int | None:
    """The `pct` percentile by nearest rank: the smallest value with at least pct % at or below."""
    n = len(sorted_values)
    if n == 0:
        return None
    return int(sorted_values[rank_of(pct, n) - 1])


def nearest_rank_counted(counted: list[tuple[int, int]], pct: int) -> int | None:
    """`nearest_rank` over (value, how many) pairs sorted by value: the same answer as over the
    values one by one."""
    total = sum(count for _, count in counted)
    if total == 0:
        return None
    rank = rank_of(pct, total)
    seen = 0
    for value, count in counted:
        seen += count
        if seen >= rank:
            return value
    return None


def _bin(value_ms: int) -> int:
    return 0 if value_ms < 1 else min(_HIST_BINS - 1, 1 + int(math.log(value_ms, _HIST_GROWTH)))


class LogHistogram:
    """Counts of milliseconds in log-spaced bins; percentiles within 2 %."""

    __slots__ = ("counts",)

    def __init__(self, counts: array[int] | None = None) -> None:
        self.counts = counts if counts is not None else array("q", bytes(8 * _HIST_BINS))

    @classmethod
    def spent(cls) -> LogHistogram:
        """A histogram with no bins, for a final minute whose distribution was packed away
        (`Bucket.spread`): it reads as empty, costs no memory, and adding to it raises."""
        return _SPENT

    def add(self, value_ms: int) -> None:
        self.counts[_bin(value_ms)] += 1

    def add_many(self, values_ms: Iterable[int]) -> None:
        """Add values, one logarithm per distinct value (a fact's events share a few)."""
        counts = self.counts
        for value_ms, n in Counter(values_ms).items():
            counts[_bin(value_ms)] += n

    def percentile(self, pct: float) -> int | None:
        total = sum(self.counts)
        if total == 0:
            return None
        rank = max(1, math.ceil(pct / 100 * total))
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return 0 if index == 0 else round(_HIST_GROWTH ** (index - 0.5))
        return None


_SPENT = LogHistogram(array("q"))
