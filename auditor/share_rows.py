"""A share's minute as a row other members can add up, and the sum of a destination's shares.

Several auditors of one destination each count a share of its source partitions
(`auditor/shares.py`). A share's row of a minute holds what adds up exactly: the counts, the
duplicates, the on-time deliveries, and its distributions packed as bytes (`Bucket.spread`):
the end-to-end lags by value, the lag-in and process histograms by bin. The destination's row
is their sum: counts added, percentiles taken over the merged distributions (nearest rank, as
one auditor's), and the minute judged up or down on the sum (`buckets.judge`), once every
share of it is final.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from config.destination import Accounting
from hifi.accounting.buckets import Bucket, Counts, Lags, judge, lags_of
from hifi.accounting.ledger import MAX_MISSING_IDS, Ledger
from hifi.accounting.percentiles import LogHistogram

Row = dict[str, Any]  # a share's minute, plain values (msgpack)


def share_row(ledger: Ledger, bucket: Bucket, *, changed_ms: int = 0, spread: bool = True) -> Row:
    """One share's minute: its counts and distributions now (final ones as fixed); `spread`
    False leaves a final minute's distributions out (its counts are what may still change).
    The distributions go packed, as bytes (`Bucket.packed_spread`): a member posts and reads
    every share's open minutes each second, and only a merge unpacks them."""
    counts = ledger.tally(bucket)
    packed = bucket.packed_spread() if not bucket.final else bucket.spread if spread else None
    fixed = bucket.lags if spread and bucket.final and bucket.spread is None else None
    return {
        "minute_ms": bucket.minute_ms,
        "counts": msgspec.to_builtins(counts),
        "duplicates": bucket.duplicates,
        "on_time": bucket.on_time,
        "final": bucket.final,
        "spread": packed,
        # a final minute restored from a snapshot written before shares: its percentiles only
        "fixed_lags": None if fixed is None else msgspec.to_builtins(fixed),
        "missing_ids": list(bucket.missing_ids or ()),
        "changed_ms": changed_ms,
    }


def distributions(row: Row) -> tuple[list[Any], list[Any], list[Any]]:
    """A share row's lags by value and its lag-in and process histograms by bin: unpacked from
    its spread, or as a member of an earlier release posted them (lists, board format 1)."""
    if "spread" not in row:
        return row["lags_ms"], row["lag_in"], row["process"]
    if not row["spread"]:  # left out, or let go (`auditor.merged.LET_GO`)
        return [], [], []
    lags, lag_in, process = msgspec.msgpack.decode(row["spread"])
    return lags, lag_in, process


def merged_row(
    rows: Iterable[Row], settings: Accounting, *, minute_ms: int, final: bool, written_ms: int
) -> Row:
    """The destination's minute from its shares' rows, as an archive `minutes` row (its keys and
    types): `final` when every share of the minute is final."""
    counts = Counts()
    by_reason: Counter[str] = Counter()
    lags: Counter[int] = Counter()
    lag_in, process = LogHistogram(), LogHistogram()
    duplicates = on_time = 0
    fixed: list[Lags] = []
    missing_ids: list[str] = []
    for row in rows:
        c = row["counts"]
        counts.entered += c["entered"]
        counts.accepted += c["accepted"]
        counts.delivered += c["delivered"]
        counts.filtered += c["filtered"]
        counts.in_retry += c["in_retry"]
        counts.waiting += c.get("waiting", 0)  # a share posted by an auditor before it: none
        counts.missing += c["missing"]
        by_reason.update(c["dead_lettered_by_reason"])
        duplicates += row["duplicates"]
        on_time += row["on_time"]
        row_lags, row_lag_in, row_process = distributions(row)
        lags.update(dict((int(v), int(n)) for v, n in row_lags))
        for i, n in row_lag_in:
            lag_in.counts[i] += n
        for i, n in row_process:
            process.counts[i] += n
        if row.get("fixed_lags"):
            fixed.append(msgspec.convert(row["fixed_lags"], Lags))
        missing_ids.extend(row["missing_ids"])
    counts.dead_lettered_by_reason = {r: n for r, n in by_reason.items() if n}
    merged = _lags(sorted(lags.items()), lag_in, process, fixed)
    up, down_reason = judge(counts, merged.p95_ms, on_time, settings) if final else (None, None)
    return {
        "minute_ms": minute_ms,
        "entered": counts.entered,
        "accepted": counts.accepted,
        "delivered": counts.delivered,
        "dead_lettered": counts.dead_lettered,
        "dead_lettered_by_reason": counts.dead_lettered_by_reason,
        "filtered": counts.filtered,
        "in_retry": counts.in_retry,
        "waiting": counts.waiting,
        "missing": counts.missing,
        "duplicates": duplicates,
        "lag_p50_ms": merged.p50_ms,
        "lag_p95_ms": merged.p95_ms,
        "lag_p99_ms": merged.p99_ms,
        "lag_in_p95_ms": merged.lag_in_p95_ms,
        "process_p95_ms": merged.process_p95_ms,
        "final": final,
        "up": up,
        "down_reason": down_reason,
        "written_ms": written_ms,
        "missing_ids": sorted(missing_ids)[:MAX_MISSING_IDS],
    }


def _lags(
    counted: list[tuple[int, int]], lag_in: LogHistogram, process: LogHistogram, fixed: list[Lags]
) -> Lags:
    """Percentiles of the merged distributions; a minute only restored from an older snapshot
    (percentiles, no distribution) keeps its own when no share has a distribution."""
    if not counted and fixed:
        return fixed[0]
    bucket = Bucket(0, lags_ms=dict(counted), lag_in=lag_in, process=process)
    return lags_of(bucket)


def loss_ratio(row: Mapping[str, Any]) -> float:
    """A merged row's `missing` over the events it accounts for."""
    undelivered = row["in_retry"] + row.get("waiting", 0) + row["missing"]
    accounted = row["delivered"] + row["dead_lettered"] + row["filtered"] + undelivered
    return row["missing"] / accounted if accounted else 0.0
