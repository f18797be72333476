"""What `connector rewind` and `connector backfill` show: per-partition tables, and a backfill's progress.

The progress is a rich bar on stderr when stderr is a terminal, else a `backfill_progress` log
line every few seconds; both show the records scanned, selected and re-offered.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime

import structlog
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from connector.backfill.checkpoint import Checkpoint, Cursor
from connector.backfill.rewind import RewindPlan

log = structlog.get_logger(__name__)

_LOG_EVERY_S = 5.0
_TABLE_WIDTH = 120  # when stdout is not a terminal

ShowProgress = Callable[[Checkpoint], None]


def iso_ms(epoch_ms: int) -> str:
    """Epoch ms as ISO 8601 UTC, to the millisecond."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def console() -> Console:
    """stdout, as wide as the terminal, or 120 columns when it is not one."""
    return Console(width=None if sys.stdout.isatty() else _TABLE_WIDTH)


def rewind_table(plan: RewindPlan, *, dry_run: bool) -> Table:
    """Per partition: the committed offset now, the offset after, the records delivered again."""
    verb = "would move" if dry_run else "moved"
    table = Table(
        title=f"{plan.dest.name}: {verb} group {plan.dest.connector_group} to {iso_ms(plan.to_ms)}"
    )
    committed = "committed now" if dry_run else "committed before"
    for column in ("topic", "partition", committed, "offset after", "delivered again"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    table.add_column("skipped", justify="right")
    for move in plan.moves:
        table.add_row(
            move.tp.topic,
            str(move.tp.partition),
            "-" if move.committed is None else str(move.committed),
            str(move.target),
            str(move.again),
            str(move.skipped),
        )
    table.caption = (
        f"delivered again: {plan.again} records; skipped (never delivered): {plan.skipped}"
        if plan.skipped
        else f"delivered again: {plan.again} records"
    )
    return table


def backfill_table(checkpoint: Checkpoint, *, dry_run: bool) -> Table:
    """Per partition: the offsets in range, and the records scanned, selected and re-offered."""
    title = (
        f"{checkpoint.dest}: backfill {iso_ms(checkpoint.from_ms)} to {iso_ms(checkpoint.to_ms)}"
    )
    table = Table(title=title + (" (dry run)" if dry_run else ""))
    columns = ["topic", "partition", "offsets", "scanned", "selected"]
    if not dry_run:
        columns.append("re-offered")
    for column in columns:
        table.add_column(column, justify="left" if column == "topic" else "right")
    for cursor in checkpoint.cursors:
        row = [
            cursor.topic,
            str(cursor.partition),
            _offsets(cursor),
            str(cursor.scanned),
            str(cursor.selected),
        ]
        if not dry_run:
            row.append(str(cursor.reoffered))
        table.add_row(*row)
    return table


def _offsets(cursor: Cursor) -> str:
    """The offsets in range, first-last: those read once done, else those planned."""
    end = cursor.next if cursor.done else cursor.stop
    return f"{cursor.start}-{end - 1}" if end > cursor.start else "-"


@contextlib.contextmanager
def progress(checkpoint: Checkpoint) -> Iterator[ShowProgress]:
    """A function to call as the backfill advances: a bar on a terminal, else log lines."""
    if not sys.stderr.isatty():
        yield _LogProgress().show
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("scanned {task.fields[scanned]}"),
        TextColumn("selected {task.fields[selected]}"),
        TextColumn("re-offered {task.fields[reoffered]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    task = bar.add_task(f"backfill {checkpoint.dest}", total=_planned(checkpoint.cursors))

    def show(state: Checkpoint) -> None:
        scanned, selected, reoffered = state.totals()
        bar.update(
            task,
            completed=_read(state.cursors),
            scanned=scanned,
            selected=selected,
            reoffered=reoffered,
        )

    show(checkpoint)
    with bar:
        yield show


class _LogProgress:
    def __init__(self) -> None:
        self._next_s = time.monotonic() + _LOG_EVERY_S

    def show(self, state: Checkpoint) -> None:
        now_s = time.monotonic()
        if now_s < self._next_s:
            return
        self._next_s = now_s + _LOG_EVERY_S
        scanned, selected, reoffered = state.totals()
        planned = _planned(state.cursors)
        log.info(
            "backfill_progress",
            dest=state.dest,
            scanned=scanned,
            selected=selected,
            reoffered=reoffered,
            percent=round(100 * _read(state.cursors) / planned, 1) if planned else 100.0,
        )


def _planned(cursors: Sequence[Cursor]) -> int:
    return sum(max(0, c.stop - c.start) for c in cursors)


def _read(cursors: Sequence[Cursor]) -> int:
    return sum(max(0, (c.stop if c.done else c.next) - c.start) for c in cursors)
