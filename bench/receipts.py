"""The destination's deliveries file read incrementally: per-run receipts, keyed by event id prefix."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson


@dataclass
class Receipts:
    """Receipt times and lags of the events of one run (ids `PREFIX-N`), first receipt per id."""

    received_ms: list[int] = field(default_factory=list)
    lags_ms: list[int] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)


class DeliveriesTail:
    """Reads the NDJSON lines `{id, received_ms, event_time}` appended since the last call."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = b""
        self.runs: dict[str, Receipts] = {}

    def read(self) -> int:
        """Take in the new complete lines; returns how many."""
        if not self._path.exists():
            return 0
        with self._path.open("rb") as file:
            file.seek(self._offset)
            data = file.read()
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line:
                self._add(orjson.loads(line))
        return len(lines)

    def _add(self, row: dict[str, object]) -> None:
        event_id = str(row["id"])
        prefix = event_id.rpartition("-")[0]
        run = self.runs.setdefault(prefix, Receipts())
        if event_id in run.ids:
            return  # a duplicate (a retried request that had been accepted): count the first
        run.ids.add(event_id)
        received_ms = row["received_ms"]
        event_time = row["event_time"]
        if isinstance(received_ms, int) and isinstance(event_time, int):
            run.received_ms.append(received_ms)
            run.lags_ms.append(received_ms - event_time)

    def delivered(self, prefix: str) -> int:
        run = self.runs.get(prefix)
        return len(run.ids) if run else 0
