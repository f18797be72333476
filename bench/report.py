"""The bench's results: the table (one row per phase or probe, fixed-width text) and the JSON file."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson

HEADER = (
    "phase",
    "offered/s",
    "events",
    "delivered",
    "events/s",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "p95<1s",
    "cores: ours",
    "others",
)


@dataclass(frozen=True)
class Row:
    """One line of the results table; lag columns only for live probes."""

    phase: str
    offered_per_s: float | None
    events: int
    delivered: int
    events_per_s: float | None
    ours_cores: float
    others_cores: float
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    held: bool | None = None

    def cells(self) -> tuple[str, ...]:
        held = "-" if self.held is None else ("yes" if self.held else "no")
        return (
            self.phase,
            _fmt(self.offered_per_s),
            _fmt(self.events),
            _fmt(self.delivered),
            _fmt(self.events_per_s),
            _fmt(self.p50_ms),
            _fmt(self.p95_ms),
            _fmt(self.p99_ms),
            held,
            _fmt(self.ours_cores, 2),
            _fmt(self.others_cores, 2),
        )


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_table(rows: Sequence[Row]) -> str:
    """Left-aligned phase names, right-aligned numbers, two spaces between columns."""
    lines = [HEADER, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def say(text: str) -> None:
    """A progress line on stderr, with the time."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def write_results(
    directory: Path, name: str, started: datetime, report: Mapping[str, object]
) -> Path:
    """Write `report` as `directory/NAME-STARTED.json` (UTC, to the second), indented; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return path
