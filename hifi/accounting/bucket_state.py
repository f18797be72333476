"""A bucket and an origin partition's outcomes as plain values, for the snapshots (`Ledger.snapshot`)."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from pyroaring import BitMap

from hifi.accounting.buckets import Bucket, Counts, Lags, Outcomes, Partition
from hifi.accounting.percentiles import LogHistogram


def _bitmaps(bitmaps: Mapping[Partition, BitMap]) -> list[list[Any]]:
    return [[tp[0], tp[1], bitmap.serialize()] for tp, bitmap in bitmaps.items()]


def _bitmaps_from(raw: Iterable[list[Any]]) -> dict[Partition, BitMap]:
    return {(t, int(p)): BitMap.deserialize(data) for t, p, data in raw}


def outcomes_state(known: Outcomes) -> dict[str, Any]:
    return {
        "delivered": known.delivered.serialize(),
        "dead": known.dead.serialize(),
        "filtered": known.filtered.serialize(),
        "handed": known.handed.serialize(),
        "dead_by_reason": {r: b.serialize() for r, b in known.dead_by_reason.items()},
    }


def outcomes_from(raw: Mapping[str, Any]) -> Outcomes:
    known = Outcomes()
    known.delivered = BitMap.deserialize(raw["delivered"])
    known.dead = BitMap.deserialize(raw["dead"])
    known.filtered = BitMap.deserialize(raw["filtered"])
    known.handed = BitMap.deserialize(raw["handed"])
    known.dead_by_reason = {r: BitMap.deserialize(b) for r, b in raw["dead_by_reason"].items()}
    return known


def bucket_state(bucket: Bucket) -> dict[str, Any]:
    return {
        "minute_ms": bucket.minute_ms,
        "entered": _bitmaps(bucket.entered),
        "accepted": _bitmaps(bucket.accepted),
        "problems": dict(bucket.problems),
        "lags_ms": list(bucket.lags_ms.items()),
        "lag_in": memoryview(bucket.lag_in.counts).cast("B"),
        "process": memoryview(bucket.process.counts).cast("B"),
        "duplicates": bucket.duplicates,
        "on_time": bucket.on_time,
        "final": bucket.final,
        "counts": None if bucket.counts is None else msgspec.to_builtins(bucket.counts),
        "lags": None if bucket.lags is None else msgspec.to_builtins(bucket.lags),
        "waiting": _bitmaps(bucket.waiting),
        "retrying": _bitmaps(bucket.retrying),
        "unseen": _bitmaps(bucket.unseen),
        "up": bucket.up,
        "down_reason": bucket.down_reason,
        "missing_ids": bucket.missing_ids,
        "spread": bucket.spread,
    }


def _histogram(data: bytes, *, final: bool) -> LogHistogram:
    """A final minute's distributions are packed in its spread (older snapshots kept zeros)."""
    if final:
        return LogHistogram.spent()
    counts = array("q")
    counts.frombytes(data)
    return LogHistogram(counts)


def bucket_from(raw: Mapping[str, Any]) -> Bucket:
    lags_ms = {int(value): int(count) for value, count in raw["lags_ms"]}
    final = bool(raw["final"])
    counts = raw["counts"]
    lags = raw["lags"]
    return Bucket(
        minute_ms=int(raw["minute_ms"]),
        entered=_bitmaps_from(raw["entered"]),
        accepted=_bitmaps_from(raw.get("accepted", ())),  # snapshots before accepted facts: none
        problems=Counter(raw["problems"]),
        lags_ms=lags_ms,
        lag_in=_histogram(raw["lag_in"], final=final),
        process=_histogram(raw["process"], final=final),
        duplicates=int(raw["duplicates"]),
        on_time=int(raw["on_time"]),
        final=final,
        counts=None if counts is None else msgspec.convert(counts, Counts),
        lags=None if lags is None else msgspec.convert(lags, Lags),
        waiting=_bitmaps_from(raw["waiting"]),
        retrying=_bitmaps_from(raw["retrying"]),
        unseen=_bitmaps_from(raw.get("unseen", ())),  # snapshots before it: none
        up=raw["up"],
        down_reason=raw["down_reason"],
        missing_ids=raw["missing_ids"],
        spread=raw.get("spread"),  # snapshots before shares: none
    )
